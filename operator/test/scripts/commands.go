// Package scripts reads the project's shell scripts and Makefile as a shell would, to check that
// every command they run is installed by the project's own files before it runs: a fresh machine
// has only Debian's priority-required packages and Go, and a developer's machine hides what is
// missing because it has everything.
package scripts

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Table is hack/lib/packages.sh's contract: the commands every Debian has, and the package of
// each command a script must require.
type Table struct {
	Base      map[string]bool
	PackageOf map[string]string
}

// Use is one command a script runs, where, and whether a `require` or a `source` of the table is
// needed before it.
type Use struct {
	Command string
	File    string
	Line    uint
	// Offset orders uses and requires within one file; InFunction uses may come before the
	// require at the top level, since the function runs later.
	Offset     uint
	InFunction bool
}

func (u Use) String() string { return fmt.Sprintf("%s:%d: %s", u.File, u.Line, u.Command) }

// Script is what one shell file runs and states.
type Script struct {
	File      string
	Functions map[string]bool
	Uses      []Use
	// Requires are `require CMD...` calls, by command, at their earliest offset.
	Requires map[string]uint
	// Calls are the project's scripts this one runs, by their path relative to the repository.
	Calls []Use
	// Sources are the files it sources, relative to the repository.
	Sources []string
}

// builtins are bash's builtins and keywords that a parser sees as calls.
var builtins = setOf(`. : [ alias bg bind break builtin caller cd command compgen complete compopt
	continue declare dirs disown echo enable eval exec exit export false fc fg getopts hash help
	history jobs kill let local logout mapfile popd printf pushd pwd read readarray readonly return
	set shift shopt source suspend test times trap true type typeset ulimit umask unalias unset wait`)

// wrappers run their argument as a command; the value says how many words after the wrapper
// precede it (-1: skip options and NAME=value words).
var wrappers = map[string]int{"exec": -1, "command": -1, "nohup": 0, "nice": -1, "setsid": -1, "env": -1, "timeout": 1, "xargs": -1}

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// literal is a word's text when it has no expansion, else "".
func literal(w *syntax.Word) string {
	if w == nil {
		return ""
	}
	return w.Lit()
}

// ReadTable parses hack/lib/packages.sh's base_commands and package_of.
func ReadTable(path string) (Table, error) {
	f, err := parseFile(path)
	if err != nil {
		return Table{}, err
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return Table{}, err
	}
	t := Table{Base: map[string]bool{}, PackageOf: map[string]string{}}
	syntax.Walk(f, func(n syntax.Node) bool {
		a, ok := n.(*syntax.Assign)
		if !ok || a.Array == nil || a.Name == nil {
			return true
		}
		for _, e := range a.Array.Elems {
			switch a.Name.Value {
			case "base_commands":
				t.Base[literal(e.Value)] = true
			case "package_of":
				if e.Index == nil {
					continue
				}
				// The parser reads [qemu-img] as arithmetic; the key is its text.
				key := string(src[e.Index.Pos().Offset():e.Index.End().Offset()])
				t.PackageOf[key] = literal(e.Value)
			}
		}
		return true
	})
	if len(t.Base) == 0 || len(t.PackageOf) == 0 {
		return t, fmt.Errorf("%s: no base_commands or package_of found", path)
	}
	return t, nil
}

func parseFile(path string) (*syntax.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(src, path)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	return f, nil
}

// ReadScript parses one shell file; name is how findings name it.
func ReadScript(path, name string) (*Script, error) {
	f, err := parseFile(path)
	if err != nil {
		return nil, err
	}
	return readShell(f, name), nil
}

func readShell(f *syntax.File, name string) *Script {
	s := &Script{File: name, Functions: map[string]bool{}, Requires: map[string]uint{}}
	var inFunction []*syntax.FuncDecl
	var visit func(n syntax.Node) bool
	visit = func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.FuncDecl:
			s.Functions[n.Name.Value] = true
			inFunction = append(inFunction, n)
			syntax.Walk(n.Body, visit)
			inFunction = inFunction[:len(inFunction)-1]
			return false
		case *syntax.CallExpr:
			s.call(n, len(inFunction) > 0)
		}
		return true
	}
	syntax.Walk(f, visit)
	return s
}

// call records the command of one simple command, looking through wrappers.
func (s *Script) call(c *syntax.CallExpr, inFunction bool) {
	args := c.Args
	for len(args) > 0 {
		word := args[0]
		use := Use{File: s.File, Line: word.Pos().Line(), Offset: word.Pos().Offset(), InFunction: inFunction}
		cmd := literal(word)
		if cmd == "" {
			cmd = scriptPath(word)
			if cmd == "" {
				return // $docker, "$tmp/pause": what it runs is checked where it is set, or built
			}
		}
		switch {
		case cmd == "require":
			for _, a := range args[1:] {
				if r := literal(a); r != "" {
					if at, seen := s.Requires[r]; !seen || use.Offset < at {
						s.Requires[r] = use.Offset
					}
				}
			}
			return
		case cmd == "source" || cmd == ".":
			if len(args) > 1 {
				if p := scriptPath(args[1]); p != "" {
					// A library sources its neighbours by their bare name.
					if strings.HasPrefix(s.File, "hack/lib/") && strings.Count(p, "/") == 1 {
						p = "hack/lib/" + filepath.Base(p)
					}
					s.Sources = append(s.Sources, p)
				}
			}
			return
		case strings.HasPrefix(cmd, "hack/") || strings.HasPrefix(cmd, ".ci/"):
			use.Command = cmd
			s.Calls = append(s.Calls, use)
			return
		case strings.Contains(cmd, "/"):
			// An absolute path to a system binary is that command; any other path is built here.
			dir, base := filepath.Split(cmd)
			if dir != "/usr/bin/" && dir != "/usr/sbin/" && dir != "/bin/" && dir != "/sbin/" {
				return
			}
			cmd = base
		}
		use.Command = cmd
		s.Uses = append(s.Uses, use)
		if cmd == "chroot" {
			return // the rest runs inside the root file system being built
		}
		if cmd == "ip" && len(args) > 3 && literal(args[1]) == "netns" && literal(args[2]) == "exec" {
			args = args[4:]
			continue
		}
		skip, ok := wrappers[cmd]
		if !ok {
			return
		}
		args = args[1:]
		if skip >= 0 {
			if len(args) <= skip {
				return
			}
			args = args[skip:]
			continue
		}
		for len(args) > 0 {
			a := literal(args[0])
			if !strings.HasPrefix(a, "-") && !strings.Contains(a, "=") {
				break
			}
			args = args[1:]
		}
	}
}

// scriptPath recognises a word naming one of the project's scripts, however it reaches it
// ("$root/hack/x.sh", "$(dirname "${BASH_SOURCE[0]}")/lib/y.sh"), and returns it relative to the
// repository; "" for anything else.
func scriptPath(w *syntax.Word) string {
	var tail strings.Builder
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			tail.WriteString(p.Value)
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					tail.WriteString(l.Value)
				} else {
					tail.Reset()
				}
			}
		case *syntax.SglQuoted:
			tail.WriteString(p.Value)
		default:
			tail.Reset()
		}
	}
	t := strings.TrimPrefix(tail.String(), "/")
	t = strings.TrimPrefix(t, "./")
	switch {
	case strings.HasPrefix(t, "hack/"), strings.HasPrefix(t, ".ci/"):
		return t
	case strings.HasPrefix(t, "lib/") && strings.HasSuffix(t, ".sh"):
		return "hack/" + t
	case strings.HasSuffix(t, ".sh") && !strings.Contains(t, "/"):
		return "hack/" + t
	}
	return ""
}

// Makefile is the targets of a Makefile with their recipes read as shell.
type Makefile struct {
	Targets map[string]*Target
}

// Target is one rule: its prerequisites, and its recipe as a script.
type Target struct {
	Name    string
	Prereqs []string
	Recipe  *Script
	// Makes are the targets its recipe runs with $(MAKE).
	Makes []string
}

var (
	assignRE = regexp.MustCompile(`^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(:=|\?=|\+=|=)\s*(.*)$`)
	ruleRE   = regexp.MustCompile(`^([A-Za-z0-9_.$()/-]+):([^=].*)?$`)
)

// ReadMakefile reads rules, their prerequisites and recipes, with the Makefile's variables
// expanded as make would before the shell sees them. $(shell ...) and other functions become a
// placeholder word: they run at parse time, not in a recipe.
func ReadMakefile(path string) (*Makefile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	vars := map[string]string{"MAKE": "make", "CURDIR": "/repo", "HOME": "/home", "MAKEFILE_LIST": "Makefile", "comma": ","}
	m := &Makefile{Targets: map[string]*Target{}}
	var current *Target
	var recipe []string
	flush := func() {
		if current != nil {
			current.Recipe = readShell(mustParse(strings.Join(recipe, "\n"), "Makefile:"+current.Name), "Makefile:"+current.Name)
			m.Targets[current.Name] = current
		}
		current, recipe = nil, nil
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "\t") && current != nil {
			cmd := strings.TrimLeft(strings.TrimSpace(line), "@-+")
			cmd = expand(cmd, vars, 0)
			cmd = strings.ReplaceAll(cmd, "$$", "$")
			recipe = append(recipe, cmd)
			current.Makes = append(current.Makes, madeTargets(cmd)...)
			continue
		}
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if a := assignRE.FindStringSubmatch(trimmed); a != nil {
			if _, set := vars[a[1]]; a[2] == "?=" && set {
				continue
			}
			if a[2] == "+=" {
				vars[a[1]] += " " + a[3]
			} else {
				vars[a[1]] = a[3]
			}
			continue
		}
		if r := ruleRE.FindStringSubmatch(trimmed); r != nil {
			flush()
			name := expand(r[1], vars, 0)
			if name == ".PHONY" {
				continue
			}
			deps := r[2]
			if i := strings.Index(deps, "##"); i >= 0 {
				deps = deps[:i]
			}
			current = &Target{Name: name, Prereqs: strings.Fields(expand(deps, vars, 0))}
			continue
		}
	}
	flush()
	return m, nil
}

func mustParse(src, name string) *syntax.File {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), name)
	if err != nil {
		panic(fmt.Sprintf("%s: recipe is not shell: %v\n%s", name, err, src))
	}
	return f
}

// expand substitutes $(VAR) and ${VAR}; make functions ($(shell ...), $(subst ...), $(dir $@))
// and unknown variables become "placeholder".
func expand(s string, vars map[string]string, depth int) string {
	if depth > 10 {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		open := s[i+1]
		if open == '$' {
			b.WriteString("$$")
			i++
			continue
		}
		if open != '(' && open != '{' {
			switch open {
			case '@':
				b.WriteString("target")
			case '<', '^':
				b.WriteString("prereq")
			default:
				b.WriteByte('$')
				continue
			}
			i++
			continue
		}
		end := matching(s, i+1)
		if end < 0 {
			b.WriteString(s[i:])
			break
		}
		ref := s[i+2 : end]
		value, ok := vars[ref]
		if strings.ContainsAny(ref, " ,$") || !ok {
			value = "placeholder"
		} else {
			value = expand(value, vars, depth+1)
		}
		b.WriteString(value)
		i = end
	}
	return b.String()
}

// matching is the index of the bracket that closes the one at s[open], or -1.
func matching(s string, open int) int {
	closer := map[byte]byte{'(': ')', '{': '}'}[s[open]]
	depth := 0
	for j := open; j < len(s); j++ {
		switch s[j] {
		case s[open]:
			depth++
		case closer:
			depth--
			if depth == 0 {
				return j
			}
		}
	}
	return -1
}

var makeCallRE = regexp.MustCompile(`(?:^|[;&|(]\s*)make\s+((?:-[-a-z]+\s+)*)([a-z][a-z0-9-]*)`)

// madeTargets are the targets a recipe line runs through $(MAKE).
func madeTargets(line string) []string {
	var out []string
	for _, m := range makeCallRE.FindAllStringSubmatch(line, -1) {
		out = append(out, m[2])
	}
	return out
}

// Finding is one command run without being installed first.
type Finding struct {
	Use    Use
	Reason string
}

func (f Finding) String() string { return f.Use.String() + ": " + f.Reason }

// Checker holds every script of the repository, so that what a script or target runs can be
// followed into the scripts it calls.
type Checker struct {
	Table   Table
	Scripts map[string]*Script
}

// provided is every command that script (and the files it sources, and the scripts it calls,
// transitively) requires.
func (c *Checker) provided(file string, seen map[string]bool) map[string]bool {
	out := map[string]bool{}
	if seen[file] {
		return out
	}
	seen[file] = true
	s := c.Scripts[file]
	if s == nil {
		return out
	}
	for r := range s.Requires {
		out[r] = true
	}
	for _, src := range s.Sources {
		for r := range c.provided(src, seen) {
			out[r] = true
		}
	}
	for _, call := range s.Calls {
		for r := range c.provided(call.Command, seen) {
			out[r] = true
		}
	}
	return out
}

// functions are those the script defines and those of the files it sources, transitively.
func (c *Checker) functions(s *Script) map[string]bool {
	fns := map[string]bool{}
	seen := map[string]bool{}
	var add func(s *Script)
	add = func(s *Script) {
		for f := range s.Functions {
			fns[f] = true
		}
		for _, src := range s.Sources {
			if lib := c.Scripts[src]; lib != nil && !seen[src] {
				seen[src] = true
				add(lib)
			}
		}
	}
	add(s)
	return fns
}

// known is a command any fresh machine has: a builtin, base, or Go (the one thing a user must
// bring).
func (c *Checker) known(cmd string) bool {
	return builtins[cmd] || c.Table.Base[cmd] || cmd == "go" || cmd == "gofmt"
}

// CheckScript reports commands a script runs that it neither gets from a base Debian nor requires
// before running them (a require in a script it calls earlier counts too).
func (c *Checker) CheckScript(s *Script) []Finding {
	var out []Finding
	fns := c.functions(s)
	sourced := map[string]bool{}
	for _, src := range s.Sources {
		sourced[src] = true
	}
	for _, u := range s.Uses {
		if c.known(u.Command) || fns[u.Command] || u.Command == "require" {
			continue
		}
		if _, inTable := c.Table.PackageOf[u.Command]; !inTable {
			out = append(out, Finding{u, "not a base command and not in hack/lib/packages.sh's table"})
			continue
		}
		if at, ok := s.Requires[u.Command]; ok && (at < u.Offset || u.InFunction) {
			continue
		}
		if c.calledBefore(s, u) {
			continue
		}
		out = append(out, Finding{u, "run without `require " + u.Command + "` before it"})
	}
	for _, call := range s.Calls {
		if _, ok := c.Scripts[call.Command]; !ok {
			out = append(out, Finding{call, "no such script"})
		}
	}
	return out
}

// calledBefore: a script this one runs before u requires u's command.
func (c *Checker) calledBefore(s *Script, u Use) bool {
	for _, call := range s.Calls {
		if call.Offset < u.Offset || (u.InFunction && !call.InFunction) {
			if c.provided(call.Command, map[string]bool{})[u.Command] {
				return true
			}
		}
	}
	return false
}

// CheckTarget reports commands a Makefile target's recipe runs that neither a base Debian has nor
// a script run before them requires: a script earlier in the recipe, or in a prerequisite's.
func (c *Checker) CheckTarget(m *Makefile, name string) []Finding {
	t := m.Targets[name]
	if t == nil || t.Recipe == nil {
		return nil
	}
	before := c.targetProvides(m, t.Prereqs, map[string]bool{})
	var out []Finding
	for _, f := range c.CheckScript(t.Recipe) {
		if before[f.Use.Command] || f.Use.Command == "make" { // make runs the recipe
			continue
		}
		out = append(out, f)
	}
	return out
}

// targetProvides is what the recipes of these targets (and their prerequisites, and the targets
// they make) require, through the scripts they run.
func (c *Checker) targetProvides(m *Makefile, names []string, seen map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		t := m.Targets[n]
		if t == nil {
			continue
		}
		for r := range c.targetProvides(m, append(append([]string(nil), t.Prereqs...), t.Makes...), seen) {
			out[r] = true
		}
		if t.Recipe == nil {
			continue
		}
		for _, call := range t.Recipe.Calls {
			for r := range c.provided(call.Command, map[string]bool{}) {
				out[r] = true
			}
		}
	}
	return out
}

// SortedTargets is the Makefile's target names in order.
func (m *Makefile) SortedTargets() []string {
	var names []string
	for n := range m.Targets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
