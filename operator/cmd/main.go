// Command flashcache is the one binary of the project: the operator, the node agent and the
// node CLI are its subcommands.
package main

import (
	"os"

	"github.com/flashcache/flashcache/operator/internal/cli"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
