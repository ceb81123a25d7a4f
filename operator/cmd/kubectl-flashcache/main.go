// Command kubectl-flashcache is the kubectl plugin (`kubectl flashcache status|flush|drain-status`):
// installed on the PATH, or through krew (deploy/krew/flashcache.yaml).
package main

import (
	"os"

	"github.com/flashcache/flashcache/operator/internal/kubectlplugin"
)

func main() {
	os.Exit(kubectlplugin.Main())
}
