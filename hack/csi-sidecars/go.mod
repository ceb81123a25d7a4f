// Pins the CSI sidecars the chart runs beside the operator's CSI controller. Built from the Go
// module proxy by hack/build-csi-sidecars.sh, each in its own module's folder (their go.mod files
// carry replace directives, which a wrapper module would not honour); this module only holds the
// versions and, in go.sum, the checksums their downloads are verified against.
module github.com/flashcache/flashcache/hack/csi-sidecars

go 1.26.0

require (
	github.com/kubernetes-csi/external-provisioner/v6 v6.4.0 // indirect
	github.com/kubernetes-csi/external-resizer/v2 v2.3.0 // indirect
)
