// Command etcd is a wrapper around etcd's real entrypoint so the etcd server
// can be built from the Go module proxy (etcd's own go.mod uses local replace
// directives, which are ignored when it is a dependency). Used by
// hack/build-control-plane.sh; not part of the operator.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
