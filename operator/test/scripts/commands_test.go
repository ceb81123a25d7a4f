package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/flashcache/flashcache/operator/internal/testenv"
)

// repoChecker reads hack/lib/packages.sh and every script of the repository.
func repoChecker(t *testing.T) *Checker {
	t.Helper()
	root := testenv.RepoRoot()
	table, err := ReadTable(filepath.Join(root, "hack", "lib", "packages.sh"))
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{Table: table, Scripts: map[string]*Script{}}
	files, err := filepath.Glob(filepath.Join(root, "hack", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	libs, _ := filepath.Glob(filepath.Join(root, "hack", "lib", "*.sh"))
	files = append(append(files, libs...), filepath.Join(root, ".ci", "run"))
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		s, err := ReadScript(f, rel)
		if err != nil {
			t.Fatal(err)
		}
		c.Scripts[rel] = s
	}
	return c
}

func TestEveryCommandTheScriptsRunIsInstalledBeforeIt(t *testing.T) {
	c := repoChecker(t)
	var uses int
	for _, s := range c.Scripts {
		uses += len(s.Uses)
		for _, f := range c.CheckScript(s) {
			t.Errorf("%s", f)
		}
	}
	m, err := ReadMakefile(filepath.Join(testenv.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range m.SortedTargets() {
		for _, f := range c.CheckTarget(m, name) {
			t.Errorf("make %s: %s", name, f)
		}
	}
	// A reader that finds nothing would pass anything.
	if uses < 200 || len(m.Targets) < 20 {
		t.Fatalf("read %d command uses in %d scripts and %d Makefile targets: the reader is broken", uses, len(c.Scripts), len(m.Targets))
	}
	required := map[string]bool{}
	for _, s := range c.Scripts {
		for r := range s.Requires {
			required[r] = true
		}
	}
	for cmd := range c.Table.PackageOf {
		if !required[cmd] {
			t.Errorf("hack/lib/packages.sh names %s, which no script requires", cmd)
		}
	}
	if c.Scripts["hack/build-base-images.sh"].Requires["mmdebstrap"] == 0 {
		t.Errorf("hack/build-base-images.sh does not require mmdebstrap")
	}
}

// The checker must catch what broke a fresh machine: mmdebstrap run by a script that only a later
// target's script installs.
func TestARunWithoutItsRequireIsCaught(t *testing.T) {
	table := Table{Base: map[string]bool{"cat": true, "dirname": true, "setsid": true, "nohup": true}, PackageOf: map[string]string{"mmdebstrap": "mmdebstrap", "qemu-img": "qemu-utils"}}
	parse := func(name, src string) *Script {
		f, err := syntax.NewParser().Parse(strings.NewReader(src), name)
		if err != nil {
			t.Fatal(err)
		}
		return readShell(f, name)
	}
	c := &Checker{Table: table, Scripts: map[string]*Script{
		"hack/lib/packages.sh":  parse("hack/lib/packages.sh", "require() { :; }\n"),
		"hack/install-vm.sh":    parse("hack/install-vm.sh", "source \"$(dirname \"$0\")/lib/packages.sh\"\nrequire mmdebstrap qemu-img\n"),
		"hack/base-late.sh":     parse("hack/base-late.sh", "source \"$(dirname \"$0\")/lib/packages.sh\"\nmmdebstrap a b\nrequire mmdebstrap\n"),
		"hack/base-missing.sh":  parse("hack/base-missing.sh", "x=$(cat f)\nif true; then setsid nohup mmdebstrap a b; fi\n"),
		"hack/base-ok.sh":       parse("hack/base-ok.sh", "source \"$(dirname \"$0\")/lib/packages.sh\"\nrequire mmdebstrap\nmmdebstrap a b\nf() { qemu-img x; }\nrequire qemu-img\n"),
		"hack/calls-install.sh": parse("hack/calls-install.sh", "\"$root/hack/install-vm.sh\"\nmmdebstrap a b\n"),
		"hack/unknown.sh":       parse("hack/unknown.sh", "frobnicate --all\n"),
	}}
	want := map[string]string{
		"hack/base-late.sh":     "require mmdebstrap",
		"hack/base-missing.sh":  "require mmdebstrap",
		"hack/base-ok.sh":       "",
		"hack/calls-install.sh": "",
		"hack/unknown.sh":       "not in hack/lib/packages.sh's table",
	}
	for name, reason := range want {
		findings := c.CheckScript(c.Scripts[name])
		switch {
		case reason == "" && len(findings) > 0:
			t.Errorf("%s: unexpected %v", name, findings)
		case reason != "" && (len(findings) != 1 || !strings.Contains(findings[0].Reason, reason)):
			t.Errorf("%s: %v, want one finding saying %q", name, findings, reason)
		}
	}

	dir := t.TempDir()
	makefile := filepath.Join(dir, "Makefile")
	if err := os.WriteFile(makefile, []byte(`TOOL ?= /usr/bin/mmdebstrap
.PHONY: image vm test
image: ## builds
	@$(TOOL) bookworm x
vm: ## installs first
	hack/install-vm.sh
	$(TOOL) bookworm x
test: vm ## a prerequisite installed it
	mmdebstrap x; \
	qemu-img create
`), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMakefile(makefile)
	if err != nil {
		t.Fatal(err)
	}
	if f := c.CheckTarget(m, "image"); len(f) != 1 || f[0].Use.Command != "mmdebstrap" {
		t.Errorf("make image: %v, want mmdebstrap reported", f)
	}
	for _, target := range []string{"vm", "test"} {
		if f := c.CheckTarget(m, target); len(f) != 0 {
			t.Errorf("make %s: unexpected %v", target, f)
		}
	}
}

// The table must name the package that really holds each command, and the base commands must
// come with every Debian: checked against dpkg for whatever is installed here.
func TestTheTableNamesThePackageThatHoldsEachCommand(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian machine: no dpkg to ask")
	}
	table, err := ReadTable(filepath.Join(testenv.RepoRoot(), "hack", "lib", "packages.sh"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for cmd, pkg := range table.PackageOf {
		files, err := exec.Command("dpkg-query", "-L", pkg).Output()
		if err != nil {
			continue // not installed here; checked on machines that have it
		}
		if !holdsCommand(string(files), cmd) {
			t.Errorf("package %s holds no command %s", pkg, cmd)
		}
		checked++
	}
	for cmd := range table.Base {
		path, err := exec.LookPath(cmd)
		if err != nil {
			t.Errorf("base command %s is not installed here", cmd)
			continue
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			t.Fatal(err)
		}
		pkg := owner(t, path, real)
		if pkg == "" {
			t.Errorf("base command %s (%s) belongs to no package", cmd, path)
			continue
		}
		prio, err := exec.Command("dpkg-query", "-W", "-f=${Priority}", pkg).Output()
		if err != nil || string(prio) != "required" {
			t.Errorf("base command %s comes from %s, priority %q: not on every Debian; put it in package_of and require it", cmd, pkg, prio)
		}
		checked++
	}
	t.Logf("%d commands checked against dpkg", checked)
}

func holdsCommand(files, cmd string) bool {
	for _, f := range strings.Split(files, "\n") {
		dir, base := filepath.Split(f)
		if base == cmd && strings.HasSuffix(strings.TrimSuffix(dir, "/"), "bin") {
			return true
		}
	}
	return false
}

// owner is the package that ships path (or, for merged /usr, the same file under /usr or not).
func owner(t *testing.T, paths ...string) string {
	t.Helper()
	for _, p := range paths {
		candidates := []string{p}
		if strings.HasPrefix(p, "/usr/") {
			candidates = append(candidates, strings.TrimPrefix(p, "/usr"))
		} else {
			candidates = append(candidates, "/usr"+p)
		}
		for _, c := range candidates {
			out, err := exec.Command("dpkg-query", "-S", c).Output()
			if err == nil {
				pkg, _, _ := strings.Cut(strings.TrimSpace(string(out)), ":")
				return pkg
			}
		}
	}
	return ""
}
