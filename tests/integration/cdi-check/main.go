// cdi-check: validates CDI spec files with the CDI reference library
// (github.com/container-orchestrated-devices/container-device-interface,
// Debian's golang-github-container-orchestrated-devices-container-device-interface-dev)
// and resolves device names the way a container engine does.
//
//	cdi-check SPEC_DIR [DEVICE...]
//	cdi-check --oci CONFIG_JSON
//
// Every *.json in SPEC_DIR must pass the JSON schema of the spec and the
// library's own checks (ReadSpec: version, kind, device names, edits); the
// registry built from SPEC_DIR must hold no error. Each DEVICE
// ("vendor/class=name") is then injected into an empty OCI spec and the
// result printed, one item a line: "node PATH TYPE MAJOR:MINOR",
// "mount DEST SRC", "env K=V". Exit 1 on any error, 2 for an unresolvable
// device. With --oci, the same lines for an OCI runtime spec (a container
// engine's config.json, as Podman hands it to its runtime). Built by
// tests/integration/test-cdi.sh with Debian's Go, offline.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/schema"
	oci "github.com/opencontainers/runtime-spec/specs-go"
)

func fail(code int, format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "cdi-check: "+format+"\n", args...)
	os.Exit(code)
}

// printEdits prints what an OCI spec holds of what CDI edits: device nodes,
// mounts and environment variables, one a line, sorted.
func printEdits(o *oci.Spec) {
	var lines []string
	if o.Linux != nil {
		for _, d := range o.Linux.Devices {
			lines = append(lines, fmt.Sprintf("node %s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
		}
	}
	for _, m := range o.Mounts {
		lines = append(lines, fmt.Sprintf("mount %s %s", m.Destination, m.Source))
	}
	if o.Process != nil {
		for _, e := range o.Process.Env {
			lines = append(lines, "env "+e)
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println("  " + l)
	}
}

func main() {
	if len(os.Args) < 2 {
		fail(1, "usage: cdi-check SPEC_DIR [DEVICE...] | cdi-check --oci CONFIG_JSON")
	}
	if os.Args[1] == "--oci" {
		if len(os.Args) != 3 {
			fail(1, "usage: cdi-check --oci CONFIG_JSON")
		}
		data, err := os.ReadFile(os.Args[2])
		if err != nil {
			fail(1, "%v", err)
		}
		var o oci.Spec
		if err := json.Unmarshal(data, &o); err != nil {
			fail(1, "%s: %v", os.Args[2], err)
		}
		printEdits(&o)
		return
	}
	dir := os.Args[1]
	s := schema.BuiltinSchema()
	// The schema must be a real one: a spec whose kind is a number fails it.
	if err := s.ValidateData([]byte(`{"cdiVersion": "0.5.0", "kind": 3, "devices": []}`)); err == nil {
		fail(1, "the builtin CDI schema accepts anything; cannot validate")
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		fail(1, "no spec file in %s", dir)
	}
	for _, f := range files {
		if err := s.ValidateFile(f); err != nil {
			fail(1, "%s: schema: %v", f, err)
		}
		spec, err := cdi.ReadSpec(f, 0)
		if err != nil {
			fail(1, "%s: %v", f, err)
		}
		fmt.Printf("spec %s kind %s/%s devices %d\n", filepath.Base(f), spec.GetVendor(), spec.GetClass(),
			len(spec.Devices))
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		fail(1, "registry: %v", err)
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fail(1, "registry: %s: %v", path, e)
		}
	}
	for _, name := range os.Args[2:] {
		if cache.GetDevice(name) == nil {
			fail(2, "unresolvable CDI device %q", name)
		}
		o := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
		if _, err := cache.InjectDevices(o, name); err != nil {
			fail(1, "inject %s: %v", name, err)
		}
		fmt.Printf("device %s\n", name)
		printEdits(o)
	}
}
