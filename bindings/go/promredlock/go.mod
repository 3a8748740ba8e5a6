module github.com/libredlockc/libredlockc/bindings/go/promredlock

go 1.19

require (
	github.com/libredlockc/libredlockc/bindings/go v1.1.0
	github.com/prometheus/client_golang v1.18.0
	github.com/prometheus/client_model v0.5.0
	github.com/prometheus/common v0.45.0
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.2.0 // indirect
	github.com/matttproud/golang_protobuf_extensions/v2 v2.0.0 // indirect
	github.com/prometheus/procfs v0.12.0 // indirect
	golang.org/x/sys v0.15.0 // indirect
	google.golang.org/protobuf v1.31.0 // indirect
)

// The core module of this checkout (ignored where promredlock is a
// dependency: there the require above is the version got).
replace github.com/libredlockc/libredlockc/bindings/go => ../
