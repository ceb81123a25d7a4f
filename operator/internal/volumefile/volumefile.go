// Package volumefile reads the FlashCacheVolume files of `flashcache node` (and the Ansible role):
// the same YAML as `kubectl apply` (FlashCacheVolumes, the FlashCachePools they are carved from,
// and the v1 Secrets their iSCSI CHAP references name), checked and defaulted with the CRDs' own
// OpenAPI schemas and CEL rules, so a host without Kubernetes refuses exactly what the API server
// refuses.
package volumefile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	fcv1 "github.com/flashcache/flashcache/operator/api/v1alpha1"
	"github.com/flashcache/flashcache/operator/config/crd"
	"github.com/flashcache/flashcache/operator/internal/blockdev"
	"github.com/flashcache/flashcache/operator/internal/engine"
)

// Validator checks and defaults objects of one kind like the API server does.
type Validator struct {
	kind       string
	structural *structuralschema.Structural
	schema     apiservervalidation.SchemaValidator
	cel        *cel.Validator
}

// Building a validator (the CRD's schema converted, its CEL rules compiled) costs more than the
// rest of reading a file: 80 ms each on this project's machine, seconds under emulation, where
// `flashcache node run` spent a quarter of a vCPU rebuilding both every round. Each is built once
// per process, when a file first holds its kind.
var (
	volumeValidator = sync.OnceValues(func() (*Validator, error) { return newValidator(crd.FlashCacheVolume) })
	poolValidator   = sync.OnceValues(func() (*Validator, error) { return newValidator(crd.FlashCachePool) })
)

// newValidator builds a validator from one embedded CRD.
func newValidator(crdYAML []byte) (*Validator, error) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(crdYAML, &def); err != nil {
		return nil, fmt.Errorf("reading the embedded CRD: %w", err)
	}
	var version *apiextensionsv1.CustomResourceDefinitionVersion
	for i := range def.Spec.Versions {
		if def.Spec.Versions[i].Name == fcv1.GroupVersion.Version {
			version = &def.Spec.Versions[i]
		}
	}
	if version == nil || version.Schema == nil {
		return nil, fmt.Errorf("the embedded CRD has no schema for %s", fcv1.GroupVersion.Version)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(version.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		return nil, fmt.Errorf("converting the CRD schema: %w", err)
	}
	structural, err := structuralschema.NewStructural(&internal)
	if err != nil {
		return nil, fmt.Errorf("the CRD schema is not structural: %w", err)
	}
	schema, _, err := apiservervalidation.NewSchemaValidator(&internal)
	if err != nil {
		return nil, fmt.Errorf("building the schema validator: %w", err)
	}
	return &Validator{
		kind:       def.Spec.Names.Kind,
		structural: structural,
		schema:     schema,
		cel:        cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
}

// InvalidError lists everything wrong with one object, each naming its field.
type InvalidError struct {
	Kind   string
	Name   string
	Errors []string
}

func (e *InvalidError) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %q is invalid:", e.Kind, e.Name)
	for _, m := range e.Errors {
		fmt.Fprintf(&b, "\n* %s", m)
	}
	return b.String()
}

// Check defaults obj in place and validates it; obj is one decoded YAML document.
func (v *Validator) Check(ctx context.Context, obj map[string]any) error {
	structuraldefaulting.Default(obj, v.structural)
	errs := apiservervalidation.ValidateCustomResource(nil, obj, v.schema)
	celErrs, _ := v.cel.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	errs = append(errs, celErrs...)
	if len(errs) == 0 {
		return nil
	}
	name, _, _ := nestedString(obj, "metadata", "name")
	inv := &InvalidError{Kind: v.kind, Name: name}
	for _, e := range errs {
		inv.Errors = append(inv.Errors, e.Error())
	}
	return inv
}

// File is what a volume file holds, as the engine sees it.
type File struct {
	Volumes []engine.Volume
	Pools   []engine.Pool
}

// Load reads every FlashCacheVolume and FlashCachePool in a file ("-" is standard input) and
// returns them as the engine's volumes and pools, defaulted and validated. Nothing is returned
// if any of them is invalid.
func Load(ctx context.Context, path string) (*File, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("opening volume file: %w", err)
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	return Read(ctx, r)
}

// Read is Load on an open stream.
func Read(ctx context.Context, r io.Reader) (*File, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var volumes []engine.Volume
	pools := map[string]engine.Pool{}
	var poolOrder []string
	var problems []error
	seen := map[string]bool{}
	secrets := map[string]*corev1.Secret{}
	for doc := 1; ; doc++ {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		// A document of comments only (a file's header before its first ---) decodes to
		// nothing; kubectl skips it too.
		if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
			continue
		}
		// Numbers as the API server sees them: int64 where whole (encoding/json would give
		// float64, which the schema's integer and int-or-string checks refuse).
		var obj map[string]any
		if err := utiljson.Unmarshal(raw, &obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if obj == nil {
			continue
		}
		if obj["apiVersion"] == "v1" && obj["kind"] == "Secret" {
			// CHAP credentials for iSCSI backing devices, as on Kubernetes. Its contents
			// never appear in an error.
			var secret corev1.Secret
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &secret); err != nil {
				return nil, fmt.Errorf("document %d: a Secret that does not decode", doc)
			}
			secrets[secretKey(secret.Namespace, secret.Name)] = &secret
			continue
		}
		if obj["apiVersion"] == fcv1.GroupVersion.String() && obj["kind"] == "FlashCachePool" {
			pv, err := poolValidator()
			if err != nil {
				return nil, err
			}
			if err := pv.Check(ctx, obj); err != nil {
				problems = append(problems, err)
				continue
			}
			var pool fcv1.FlashCachePool
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &pool); err != nil {
				return nil, fmt.Errorf("document %d: %w", doc, err)
			}
			if _, dup := pools[pool.Name]; dup {
				return nil, fmt.Errorf("document %d: pool %q appears twice", doc, pool.Name)
			}
			pools[pool.Name] = engine.PoolOf(&pool)
			poolOrder = append(poolOrder, pool.Name)
			continue
		}
		if obj["apiVersion"] != fcv1.GroupVersion.String() || obj["kind"] != "FlashCacheVolume" {
			return nil, fmt.Errorf("document %d: want apiVersion %s, kind FlashCacheVolume or FlashCachePool (or v1 Secret); got %v, %v",
				doc, fcv1.GroupVersion, obj["apiVersion"], obj["kind"])
		}
		v, err := volumeValidator()
		if err != nil {
			return nil, err
		}
		if err := v.Check(ctx, obj); err != nil {
			problems = append(problems, err)
			continue
		}
		var fcv fcv1.FlashCacheVolume
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &fcv); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if seen[fcv.Name] {
			return nil, fmt.Errorf("document %d: volume %q appears twice", doc, fcv.Name)
		}
		seen[fcv.Name] = true
		volumes = append(volumes, engine.VolumeOf(&fcv))
	}
	for i, vol := range volumes {
		// A carved volume's pool is on the same host, so in the same file.
		if ref := vol.Spec.Pool; ref != nil {
			pool, ok := pools[ref.Name]
			switch {
			case !ok:
				problems = append(problems, fmt.Errorf("FlashCacheVolume %q: spec.pool.name: no FlashCachePool %q in the file", vol.Name, ref.Name))
			case pool.Spec.NodeName != vol.Spec.NodeName:
				problems = append(problems, fmt.Errorf("FlashCacheVolume %q: spec.nodeName: %q, but pool %q is on %q", vol.Name, vol.Spec.NodeName, ref.Name, pool.Spec.NodeName))
			default:
				volumes[i].Pool = &pool
			}
		}
	}
	for i := range volumes {
		ref := chapSecretRef(volumes[i])
		if ref == nil {
			continue
		}
		secret, ok := secrets[secretKey(ref.Namespace, ref.Name)]
		if !ok {
			problems = append(problems, fmt.Errorf("FlashCacheVolume %q: spec.backingDevice.iscsi.chapSecretRef: no Secret %s in the file", volumes[i].Name, secretKey(ref.Namespace, ref.Name)))
			continue
		}
		chap, err := CHAPFromSecret(secret)
		if err != nil {
			problems = append(problems, fmt.Errorf("FlashCacheVolume %q: spec.backingDevice.iscsi.chapSecretRef: %w", volumes[i].Name, err))
			continue
		}
		volumes[i].CHAP = chap
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	if len(volumes) == 0 && len(pools) == 0 {
		return nil, fmt.Errorf("no FlashCacheVolume or FlashCachePool in the file")
	}
	f := &File{Volumes: volumes}
	for _, name := range poolOrder {
		f.Pools = append(f.Pools, pools[name])
	}
	return f, nil
}

// The keys of a CHAP Secret, as Kubernetes' iSCSI volumes name them.
const (
	CHAPUsernameKey = "node.session.auth.username"
	CHAPPasswordKey = "node.session.auth.password"
)

// CHAPFromSecret reads a CHAP Secret's credentials; an error names the missing key, never a value.
func CHAPFromSecret(s *corev1.Secret) (*blockdev.CHAP, error) {
	value := func(key string) string {
		if v, ok := s.StringData[key]; ok {
			return v
		}
		return string(s.Data[key])
	}
	chap := &blockdev.CHAP{Username: value(CHAPUsernameKey), Password: value(CHAPPasswordKey)}
	for _, kv := range [][2]string{{CHAPUsernameKey, chap.Username}, {CHAPPasswordKey, chap.Password}} {
		if kv[1] == "" {
			return nil, fmt.Errorf("Secret %s has no %s", secretKey(s.Namespace, s.Name), kv[0])
		}
	}
	return chap, nil
}

func chapSecretRef(v engine.Volume) *corev1.SecretReference {
	if s := v.Spec.BackingISCSI(); s != nil {
		return s.CHAPSecretRef
	}
	return nil
}

func secretKey(namespace, name string) string {
	if namespace == "" {
		namespace = "default"
	}
	return namespace + "/" + name
}

func nestedString(obj map[string]any, path ...string) (string, bool, error) {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		cur = m[p]
	}
	s, ok := cur.(string)
	return s, ok, nil
}
