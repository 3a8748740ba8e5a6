module github.com/redlockc/redlockc-go

go 1.19
