// Package cli wires the flashcache subcommands; each front end stays thin.
package cli

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/flashcache/flashcache/operator/internal/version"
)

// NewRootCommand returns the `flashcache` command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "flashcache",
		Short:         "SSD-cached block devices (bcache) for databases, on Kubernetes or plain hosts",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(
		newOperatorCommand(),
		newAgentCommand(),
		newNodeCommand(),
		newVersionCommand(),
	)
	return root
}

func newVersionCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of this binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := version.Get()
			switch output {
			case "json":
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			case "text":
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "flashcache %s (commit %s, %s, %s)\n",
					info.Version, orUnknown(info.Commit), info.GoVersion, info.Platform)
				return err
			default:
				return fmt.Errorf("--output: unknown format %q (want text or json)", output)
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
