module ksidecar/clients/go

go 1.23.0

require (
	google.golang.org/grpc v1.75.1
	google.golang.org/protobuf v1.36.12
)

require (
	golang.org/x/net v0.43.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7 // indirect
)
