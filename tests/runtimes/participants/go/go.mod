module redlockc-counter

go 1.19

require github.com/redlockc/redlockc-go v0.0.0

replace github.com/redlockc/redlockc-go => ../../../../bindings/go
