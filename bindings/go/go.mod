module github.com/libredlockc/libredlockc/bindings/go

go 1.19
