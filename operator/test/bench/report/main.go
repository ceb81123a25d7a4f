// Command report turns a `make bench` results folder (oltp.json, flush.json, scale.json) into
// docs/benchmarks.md and the charts it embeds, so the published numbers are always the measured
// ones. Any of the JSON files may be missing: its sections then say so.
//
//	go run ./test/bench/report -results DIR -docs DOCSDIR [-notes FILE]
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	resultsDir := flag.String("results", "", "the results folder `make bench` wrote (oltp.json, flush.json, scale.json)")
	docsDir := flag.String("docs", "", "where benchmarks.md and the benchmarks/ charts go")
	notesFile := flag.String("notes", "", "optional hand-written analysis, printed verbatim under \"Analysis\"")
	flag.Parse()
	if *resultsDir == "" || *docsDir == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: report -results DIR -docs DOCSDIR [-notes FILE]")
		os.Exit(2)
	}
	if err := generate(*resultsDir, *docsDir, *notesFile); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}
