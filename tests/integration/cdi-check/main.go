// cdi-check: validates CDI spec files with the CDI reference library
// (github.com/container-orchestrated-devices/container-device-interface,
// Debian's golang-github-container-orchestrated-devices-container-device-interface-dev)
// and resolves device names the way a container engine does.
//
//	cdi-check SPEC_DIR [DEVICE...]
//
// Every *.json in SPEC_DIR must pass the JSON schema of the spec and the
// library's own checks (ReadSpec: version, kind, device names, edits); the
// registry built from SPEC_DIR must hold no error. Each DEVICE
// ("vendor/class=name") is then injected into an empty OCI spec and the
// result printed, one item a line: "node PATH TYPE MAJOR:MINOR",
// "mount DEST SRC", "env K=V". Exit 1 on any error, 2 for an unresolvable
// device. Built by tests/integration/test-cdi.sh with Debian's Go, offline.
package main

import (
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

func main() {
	if len(os.Args) < 2 {
		fail(1, "usage: cdi-check SPEC_DIR [DEVICE...]")
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
		var lines []string
		for _, d := range o.Linux.Devices {
			lines = append(lines, fmt.Sprintf("node %s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
		}
		for _, m := range o.Mounts {
			lines = append(lines, fmt.Sprintf("mount %s %s", m.Destination, m.Source))
		}
		for _, e := range o.Process.Env {
			lines = append(lines, "env "+e)
		}
		sort.Strings(lines)
		fmt.Printf("device %s\n", name)
		for _, l := range lines {
			fmt.Println("  " + l)
		}
	}
}
