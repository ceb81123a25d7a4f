package blockdev

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestRunnerRefusesACommandNotInTools(t *testing.T) {
	for _, name := range []string{"rm", "sh", "mkfs.btrfs", "/usr/sbin/wipefs"} {
		_, err := Runner{}.Run(context.Background(), name, "--version")
		var unknown *UnknownToolError
		if !errors.As(err, &unknown) || unknown.Name != name {
			t.Errorf("Run(%q) err = %v, want *UnknownToolError", name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "blockdev.Tools") {
			t.Errorf("Run(%q) error %q does not say where to declare the command", name, err)
		}
	}
}

func TestRunnerRunsADeclaredTool(t *testing.T) {
	// Whether wipefs is installed here or not, the table must not be what stops it.
	_, err := Runner{}.Run(context.Background(), "wipefs", "--version")
	var unknown *UnknownToolError
	if errors.As(err, &unknown) {
		t.Errorf("a declared tool was refused: %v", err)
	}
}

func TestToolsAreCompleteAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, tool := range Tools {
		if tool.Name == "" || tool.Debian == "" || tool.RHEL == "" || tool.Why == "" {
			t.Errorf("incomplete entry %+v", tool)
		}
		if strings.ContainsRune(tool.Name, '/') {
			t.Errorf("%q: a tool is a name looked up on PATH, not a path", tool.Name)
		}
		if seen[tool.Name] {
			t.Errorf("%q is declared twice", tool.Name)
		}
		seen[tool.Name] = true
	}
}

func TestPackages(t *testing.T) {
	debian, err := Packages("debian")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(debian) || !slices.Contains(debian, "bcache-tools") || !slices.Contains(debian, "open-iscsi") {
		t.Errorf("debian packages %v", debian)
	}
	if len(slices.Compact(slices.Clone(debian))) != len(debian) {
		t.Errorf("debian packages repeat: %v", debian)
	}
	if rhel, err := Packages("rhel"); err != nil || !slices.Contains(rhel, "iscsi-initiator-utils") {
		t.Errorf("rhel packages %v, %v", rhel, err)
	}
	if _, err := Packages("arch"); err == nil {
		t.Error("an unknown family gave no error")
	}
}

func TestLocateTools(t *testing.T) {
	got := LocateTools(func(name string) (string, error) {
		if name == "sgdisk" {
			return "", errors.New("not found")
		}
		return "/sbin/" + name, nil
	})
	if len(got) != len(Tools) {
		t.Fatalf("%d statuses for %d tools", len(got), len(Tools))
	}
	for _, s := range got {
		if s.Found() == (s.Name == "sgdisk") {
			t.Errorf("%s: found %v, path %q, error %q", s.Name, s.Found(), s.Path, s.Error)
		}
	}
}

// commandArg is, for each function that takes a command name and passes it on to Runner, the
// position of that name among its arguments.
var commandArg = map[string]int{
	"Run":          1, // Runner.Run(ctx, name, args...)
	"RunInput":     2, // Runner.RunInput(ctx, stdin, name, args...)
	"whenReleased": 1, // engine's Engine.whenReleased(ctx, name, args...)
}

// TestToolsMatchTheSources keeps Tools honest: every command name the non-test sources of
// internal/ pass to Runner (or to a function in commandArg that forwards it) is declared, and
// every declared tool is either run somewhere or marked Planned (and then not run yet). A name
// that is not a string literal can only be checked here if the function passing it is itself a
// forwarder in commandArg.
func TestToolsMatchTheSources(t *testing.T) {
	used := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			_, forwarder := commandArg[fn.Name.Name]
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var callee string
				switch f := call.Fun.(type) {
				case *ast.SelectorExpr:
					callee = f.Sel.Name
				case *ast.Ident:
					callee = f.Name
				}
				i, ok := commandArg[callee]
				if !ok || len(call.Args) <= i {
					return true // cmd.Run(), or another Run that takes no command name
				}
				where := fset.Position(call.Pos()).String()
				lit, ok := call.Args[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					if !forwarder {
						t.Errorf("%s: %s is given a command name that is not a string literal; use a literal, or list %s in commandArg if it forwards the name", where, callee, fn.Name.Name)
					}
					return true
				}
				name, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				used[name] = append(used[name], where)
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) == 0 {
		t.Fatal("found no command run in the sources: is the walk looking in the right place?")
	}
	for name, where := range used {
		tool, ok := ToolNamed(name)
		switch {
		case !ok:
			t.Errorf("%q is run at %v but is not in Tools", name, where)
		case tool.Planned != "":
			t.Errorf("%q is run at %v: it is no longer planned, clear its Planned", name, where)
		}
	}
	for _, tool := range Tools {
		if _, ok := used[tool.Name]; !ok && tool.Planned == "" {
			t.Errorf("%q is in Tools but nothing runs it: remove it, or say in Planned what will", tool.Name)
		}
	}
}
