package wire

import "github.com/capsule-host/capsule-host/capsules/sdk/internal/abi"

// Layouts of the WIT types, derived from their structure (field order as
// in wit/process@1.1.0/host.wit; 1.0.0's records are identical).
var (
	LEnvVar       = abi.Record(abi.String, abi.String)
	LSpawnRequest = abi.Record(
		abi.String,             // cmd
		abi.List(),             // args
		abi.Option(abi.List()), // stdin
		abi.List(),             // env
		abi.Option(abi.String), // cwd
		abi.Option(abi.U64),    // timeout-ms
	)
	LExitInfo       = abi.Record(abi.Option(abi.S32), abi.Option(abi.S32))
	LProcessResult  = abi.Record(abi.List(), abi.List(), LExitInfo, abi.Bool)
	LReadLogsResult = abi.Record(abi.List(), abi.List(), abi.Bool, abi.Option(LExitInfo), abi.U64)

	// LErrorCode10 is 1.0.0's error-code, LErrorCode11 1.1.0's.
	LErrorCode10 = abi.Variant(
		&abi.String, &abi.String, &abi.String, nil, &abi.String,
		nil, nil, nil, &abi.String, &abi.String)
	LErrorCode11 = abi.Variant(
		&abi.String, &abi.String, &abi.String, nil, &abi.String,
		nil, nil, nil, &abi.String, &abi.String,
		nil, nil, nil, &abi.U64)

	LResourceLimits = abi.Record(abi.Option(abi.U64), abi.Option(abi.U64), abi.Option(abi.U32), abi.Option(abi.U32))
	LPersistOptions = abi.Record(
		abi.Option(abi.String), // label
		abi.Bool,               // keep-stdin-open
		abi.Enum(2),            // overflow
		abi.Option(abi.U32),    // log-ring-bytes
		abi.Option(abi.U64),    // max-lifetime-ms
		abi.Option(abi.U64),    // idle-timeout-ms
		abi.Option(abi.U64),    // exit-retention-ms
		LResourceLimits,
	)
	// LSpawnPersistentParams is the tuple spawn-persistent's 35 flat
	// params are passed through (more than MaxFlatParams).
	LSpawnPersistentParams = abi.Tuple(LSpawnRequest, LPersistOptions)

	LLogChunk    = abi.Record(abi.List(), abi.String, abi.U64, abi.Bool)
	LProcessInfo = abi.Record(
		abi.String,              // id
		abi.String,              // label
		abi.String,              // command
		abi.Option(abi.U32),     // os-pid
		abi.Enum(3),             // phase
		abi.Option(LExitInfo),   // exit
		abi.Option(abi.Enum(7)), // exit-reason
		abi.U64,                 // age-ms
		abi.U64,                 // idle-ms
		abi.U64,                 // buffered-bytes
		abi.U64,                 // bytes-dropped
		abi.Bool,                // stdin-open
		abi.Option(abi.U64),     // cpu-ms
		abi.Option(abi.U64),     // mem-bytes-peak
	)
	LExitEvent    = abi.Record(LExitInfo, abi.Enum(7))
	LEventKind    = abi.Variant(&LExitEvent, abi.Ptr(abi.Enum(2)), nil)
	LProcessEvent = abi.Record(abi.U64, abi.String, LEventKind)
	LEventBatch   = abi.Record(abi.List(), abi.U64, abi.U64)
)

// ResultOf is result<ok, error-code> for the given error-code layout.
func ResultOf(ok *abi.Type, ec abi.Type) abi.Type { return abi.Result(ok, &ec) }

// ResultShape is the size, alignment and payload offset of
// result<ok, error-code> (ok nil: no payload), as ResultOf computes them
// but without building the flat signature: bindings call it per call.
func ResultShape(ok *abi.Type, ec abi.Type) (size, align, payload uint32) {
	align, maxSize := ec.Align, ec.Size
	if ok != nil {
		align, maxSize = max(align, ok.Align), max(maxSize, ok.Size)
	}
	payload = abi.AlignTo(1, align)
	return abi.AlignTo(payload+maxSize, align), align, payload
}
