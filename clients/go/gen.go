// Stub generation: `go generate` rewrites kspb/ (committed) from proto/.
package ksidecar

//go:generate sh ./gen.sh
