// Package crd embeds the generated CustomResourceDefinitions, so that `flashcache node` validates
// a volume file with exactly the schema and CEL rules the API server enforces.
package crd

import _ "embed"

// FlashCacheVolume is the generated CRD of FlashCacheVolume (a copy of crds/ at the top).
//
//go:embed bases/flashcache.io_flashcachevolumes.yaml
var FlashCacheVolume []byte

// FlashCachePool is the generated CRD of FlashCachePool.
//
//go:embed bases/flashcache.io_flashcachepools.yaml
var FlashCachePool []byte
