package ansible

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/testenv"
)

func roleFile(t *testing.T, path string, into any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "roles", "flashcache", path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// The role installs the packages of the engine's tool table, for each family.
func TestRolePackagesAreTheEnginesTools(t *testing.T) {
	for file, family := range map[string]string{"vars/Debian.yml": "debian", "vars/RedHat.yml": "rhel"} {
		var vars struct {
			Packages []string `json:"flashcache_packages"`
		}
		roleFile(t, file, &vars)
		want, err := blockdev.Packages(family)
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(vars.Packages)
		if !reflect.DeepEqual(vars.Packages, want) {
			t.Errorf("%s: %v, want the tool table's %s packages %v", file, vars.Packages, family, want)
		}
	}
}

type specOption struct {
	Options map[string]specOption `json:"options"`
}

// names lists an option tree's paths, as "cacheDevice.path".
func names(prefix string, options map[string]specOption, out map[string]bool) {
	for name, o := range options {
		out[prefix+name] = true
		names(prefix+name+".", o.Options, out)
	}
}

type schema struct {
	Properties map[string]schema `json:"properties"`
	Items      *schema           `json:"items"`
}

func schemaNames(prefix string, s schema, out map[string]bool) {
	for name, p := range s.Properties {
		out[prefix+name] = true
		schemaNames(prefix+name+".", p, out)
		if p.Items != nil {
			schemaNames(prefix+name+".", *p.Items, out)
		}
	}
}

// A volume or a pool in the role's variables has exactly the fields of its CRD's spec (plus its
// name), so a spec moves between kubectl and Ansible unchanged.
func TestRoleVolumeOptionsAreTheCRDsSpec(t *testing.T) {
	var specs struct {
		ArgumentSpecs map[string]struct {
			Options map[string]struct {
				Options map[string]specOption `json:"options"`
			} `json:"options"`
		} `json:"argument_specs"`
	}
	roleFile(t, "meta/argument_specs.yml", &specs)
	for variable, crdFile := range map[string]string{
		"flashcache_volumes": "flashcache.io_flashcachevolumes.yaml",
		"flashcache_pools":   "flashcache.io_flashcachepools.yaml",
	} {
		optionsAreTheSpec(t, variable, specs.ArgumentSpecs["main"].Options[variable].Options, crdFile)
	}
}

func optionsAreTheSpec(t *testing.T, variable string, options map[string]specOption, crdFile string) {
	role := map[string]bool{}
	names("", options, role)
	// The object's metadata, not its spec.
	delete(role, "name")
	delete(role, "annotations")

	raw, err := os.ReadFile(filepath.Join(testenv.CRDDir(), crdFile))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema schema `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	api := map[string]bool{}
	schemaNames("", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"], api)
	for name := range api {
		if !role[name] {
			t.Errorf("%s's spec.%s is not an option of %s in meta/argument_specs.yml", crdFile, name, variable)
		}
	}
	for name := range role {
		if !api[name] {
			t.Errorf("%s option %s is not a field of %s's spec", variable, name, crdFile)
		}
	}
}

// Each role's defaults are all checked by its argument specs and documented in its README.
func TestRoleDefaultsAreSpecifiedAndDocumented(t *testing.T) {
	for _, role := range []string{"flashcache", "flashcache_mysql"} {
		dir := filepath.Join(testenv.RepoRoot(), "roles", role)
		var defaults map[string]any
		var specs struct {
			ArgumentSpecs map[string]struct {
				Options map[string]any `json:"options"`
			} `json:"argument_specs"`
		}
		for file, into := range map[string]any{"defaults/main.yml": &defaults, "meta/argument_specs.yml": &specs} {
			raw, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil {
				t.Fatal(err)
			}
			if err := yaml.Unmarshal(raw, into); err != nil {
				t.Fatalf("%s/%s: %v", role, file, err)
			}
		}
		readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		for name := range defaults {
			if _, ok := specs.ArgumentSpecs["main"].Options[name]; !ok {
				t.Errorf("%s: default %s is not in meta/argument_specs.yml", role, name)
			}
			if !strings.Contains(string(readme), "| `"+name+"` |") {
				t.Errorf("%s: default %s is not in the README's variables table", role, name)
			}
		}
		for name := range specs.ArgumentSpecs["main"].Options {
			if _, ok := defaults[name]; !ok {
				t.Errorf("%s: option %s has no default in defaults/main.yml", role, name)
			}
		}
	}
}
