// Stub generation: `go generate` writes kspb/ (never committed) from proto/.
package ksidecar

//go:generate sh ./gen.sh
