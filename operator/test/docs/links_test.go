// Package docs checks the repository's Markdown: every relative link reaches a file or folder
// that exists, and every anchor a heading of the page it points into, so that moving or
// renaming a page or a heading cannot leave a reader at a dead end.
package docs

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// markdown parses as GitHub renders: tables hold links too.
var markdown = goldmark.New(goldmark.WithExtensions(extension.GFM))

// skippedDirs are not documentation: build output, test logs, dependencies.
var skippedDirs = map[string]bool{".git": true, "bin": true, "test-logs": true, "node_modules": true}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "Makefile")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

func TestEveryRelativeLinkAndAnchorResolves(t *testing.T) {
	root := repoRoot(t)
	problems, pages, err := checkTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if pages < 10 {
		t.Fatalf("found only %d Markdown files under %s: the walk is broken", pages, root)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// A broken file link, a broken anchor into another page and one into the same page are each
// reported; working ones are not.
func TestBrokenLinksAreReported(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "# Top\n\n"+
		"[ok](docs/guide.md#the-flush-kubectl-drain) [ok dir](docs/) [ok self](#top)\n"+
		"[ok dup](docs/guide.md#usage-1) [web](https://example.com/x#y) [mail](mailto:a@b)\n\n"+
		"| a | b |\n| --- | --- |\n| [gone](docs/missing.md) | x |\n\n"+
		"[bad anchor](docs/guide.md#nowhere) [bad self](#bottom)\n")
	write("docs/guide.md", "# Guide\n\n## The flush: `kubectl drain`\n\n## Usage\n\n## Usage\n")
	problems, pages, err := checkTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pages != 2 {
		t.Errorf("pages = %d, want 2", pages)
	}
	want := []string{
		`README.md: link "#bottom": no heading "bottom" in README.md`,
		`README.md: link "docs/guide.md#nowhere": no heading "nowhere" in docs/guide.md`,
		`README.md: link "docs/missing.md": docs/missing.md does not exist`,
	}
	if got := strings.Join(problems, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

// GitHub's anchors, as it renders them for headings of this repository's kinds.
func TestAnchorsAreGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"`kubectl drain`: the blocking flush":  "kubectl-drain-the-blocking-flush",
		"On a host: `flashcache node`":         "on-a-host-flashcache-node",
		"flashcache.io/v1alpha1":               "flashcacheiov1alpha1",
		"Status, and who writes it":            "status-and-who-writes-it",
		"What the power-cut test found":        "what-the-power-cut-test-found",
		"Benchmarks (`make bench`)":            "benchmarks-make-bench",
		"Sizes_and  two spaces":                "sizes_and--two-spaces",
		"Ünïcode letters stay, → arrows don't": "ünïcode-letters-stay--arrows-dont",
	} {
		doc := markdown.Parser().Parse(text.NewReader([]byte("# " + heading + "\n")))
		got := anchor(headingText(doc.FirstChild(), []byte("# "+heading+"\n")))
		if got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// checkTree reads every Markdown file under root and returns what does not resolve, sorted.
func checkTree(root string) (problems []string, pages int, err error) {
	anchors := map[string]map[string]bool{} // page (relative to root) -> its anchors
	links := map[string][]string{}          // page -> its link destinations
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		source, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		anchors[rel], links[rel] = readPage(source)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for page, destinations := range links {
		for _, destination := range destinations {
			if problem := resolve(root, page, destination, anchors); problem != "" {
				problems = append(problems, fmt.Sprintf("%s: link %q: %s", page, destination, problem))
			}
		}
	}
	sort.Strings(problems)
	return problems, len(anchors), nil
}

// resolve says what is wrong with one link of page, or "" when it reaches its target.
func resolve(root, page, destination string, anchors map[string]map[string]bool) string {
	parsed, err := url.Parse(destination)
	if err != nil {
		return fmt.Sprintf("not a URL: %v", err)
	}
	if parsed.Scheme != "" || parsed.Host != "" {
		return "" // the web is not checked: no network in CI, and it changes on its own
	}
	target := page
	if parsed.Path != "" {
		if strings.HasPrefix(parsed.Path, "/") {
			target = filepath.Clean(strings.TrimPrefix(parsed.Path, "/"))
		} else {
			target = filepath.Join(filepath.Dir(page), parsed.Path)
		}
		if strings.HasPrefix(target, "..") {
			return "points outside the repository"
		}
		if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			return fmt.Sprintf("%s does not exist", target)
		}
	}
	if parsed.Fragment == "" {
		return ""
	}
	targetAnchors, isPage := anchors[target]
	if !isPage {
		return "" // an anchor into source code is a line number, which GitHub resolves
	}
	if !targetAnchors[parsed.Fragment] {
		return fmt.Sprintf("no heading %q in %s", parsed.Fragment, target)
	}
	return ""
}

// htmlAnchor finds anchors that pages set by hand: <a name="x"> or id="x".
var htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)

// readPage returns a page's anchors (its headings', numbered as GitHub numbers repeats, and
// hand-set ones) and its link and image destinations.
func readPage(source []byte) (map[string]bool, []string) {
	anchors := map[string]bool{}
	seen := map[string]int{}
	var links []string
	doc := markdown.Parser().Parse(text.NewReader(source))
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch node := n.(type) {
		case *ast.Heading:
			base := anchor(headingText(node, source))
			name := base
			if count := seen[base]; count > 0 {
				name = fmt.Sprintf("%s-%d", base, count)
			}
			seen[base]++
			anchors[name] = true
		case *ast.Link:
			links = append(links, string(node.Destination))
		case *ast.Image:
			links = append(links, string(node.Destination))
		}
		return ast.WalkContinue, nil
	})
	for _, match := range htmlAnchor.FindAllSubmatch(source, -1) {
		anchors[string(match[1])] = true
	}
	return anchors, links
}

// headingText is the text a reader sees in a heading: code spans' and links' text included.
func headingText(heading ast.Node, source []byte) string {
	var b bytes.Buffer
	_ = ast.Walk(heading, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch node := n.(type) {
		case *ast.Text:
			b.Write(node.Segment.Value(source))
		case *ast.String:
			b.Write(node.Value)
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// anchor makes GitHub's anchor of a heading: lower case, letters, digits, '-' and '_' kept,
// spaces made '-', everything else dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
