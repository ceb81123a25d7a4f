package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
)

// toolsReport is `flashcache node tools -o json`.
type toolsReport struct {
	Missing []string              `json:"missing"`
	Tools   []blockdev.ToolStatus `json:"tools"`
}

// errToolsMissing makes the command exit non-zero after the report was printed.
type errToolsMissing []string

func (e errToolsMissing) Error() string {
	return "missing on PATH: " + strings.Join(e, ", ")
}

func newToolsCommand(opts *nodeOptions) *cobra.Command {
	var packages string
	cmd := &cobra.Command{
		Use:   "tools",
		Short: "List the commands the engine runs, their packages, and where this host has them; fail naming the missing ones",
		Long: `Looks up on PATH every external command the engine may run (the table in
operator/internal/blockdev/tools.go), with the Debian and RHEL packages that provide it. Exits
non-zero, naming them, when some are missing. Tools marked planned are for a coming feature
and are checked all the same, so a host is ready for it.
With --packages=debian or --packages=rhel, prints only the packages to install, one per line
(the image's Dockerfile installs these).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if packages != "" {
				list, err := blockdev.Packages(packages)
				if err != nil {
					return fmt.Errorf("--packages: %w", err)
				}
				_, err = fmt.Fprintln(cmd.OutOrStdout(), strings.Join(list, "\n"))
				return err
			}
			if opts.output != "text" && opts.output != "json" {
				return fmt.Errorf("--output: unknown format %q (want text or json)", opts.output)
			}
			return reportTools(cmd.OutOrStdout(), opts.output, blockdev.LocateTools(nil))
		},
	}
	cmd.Flags().StringVar(&packages, "packages", "", "print the packages of one family (debian or rhel) instead")
	return cmd
}

// reportTools prints the statuses and returns errToolsMissing when some tool was not found.
func reportTools(w io.Writer, output string, statuses []blockdev.ToolStatus) error {
	report := toolsReport{Missing: []string{}, Tools: statuses}
	for _, s := range statuses {
		if !s.Found() {
			report.Missing = append(report.Missing, s.Name)
		}
	}
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tDEBIAN\tRHEL\tPATH")
		for _, s := range statuses {
			where := s.Path
			if !s.Found() {
				where = "MISSING"
			}
			if s.Planned != "" {
				where += " (planned: " + s.Planned + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Debian, s.RHEL, where)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(report.Missing) > 0 {
		return errToolsMissing(report.Missing)
	}
	return nil
}
