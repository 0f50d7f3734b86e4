/* The YAML layer of spec/: every parser of a config file includes this one
 * header. It reads YAML as mig-parted's YAML stack does (go-yaml v2, YAML 1.1
 * resolution, then sigs.k8s.io/yaml's conversion to JSON), in pieces named
 * for their job, each depending only on the ones before it:
 *   yaml-load.h    a document as a tree with positions, from libyaml's event
 *                  API under limits (nodes with aliases expanded, depth), after
 *                  an encoding check
 *   yaml-error.h   the walk's context: errors at a node's position with the
 *                  field path
 *   yaml-scalar.h  a scalar's type (go-yaml v2) and its string form
 *                  (sigs.k8s.io/yaml)
 *   yaml-map.h     a mapping's effective pairs (merge keys, duplicate keys),
 *                  strict mappings with known fields
 *   yaml-read.h    the parse-then-walk frame and the typed readers of field
 *                  values (string, list, map, bool, version) */
#pragma once

#include "spec/yaml-error.h"
#include "spec/yaml-load.h"
#include "spec/yaml-map.h"
#include "spec/yaml-read.h"
#include "spec/yaml-scalar.h"
