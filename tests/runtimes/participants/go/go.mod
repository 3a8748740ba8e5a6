module redlockc-counter

go 1.19

require github.com/libredlockc/libredlockc/bindings/go v0.0.0

replace github.com/libredlockc/libredlockc/bindings/go => ../../../../bindings/go
