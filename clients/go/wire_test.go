// Unit tests of the hand-written wire codec against the generated protobuf code.
package ksidecar

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"ksidecar/clients/go/kspb"
)

func TestAckRequestMatchesProtoMarshal(t *testing.T) {
	ids := []string{"a1-3-2-0-1-demo", "", "x"}
	want, _ := proto.Marshal(&kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Ack{Ack: &kspb.AckIds{AckIds: ids}}})
	if got := ackRequest(ids).buf; !bytes.Equal(got, want) {
		t.Fatalf("ackRequest % x, proto.Marshal % x", got, want)
	}
}

func TestDecodeMatchesProtoUnmarshal(t *testing.T) {
	recs := []*kspb.Record{
		{Topic: "t", Partition: 3, Offset: 1 << 40, TimestampMs: 1796001086491, Key: []byte("k"),
			Value: []byte("v"), AckId: "id1", Attempt: 2,
			Headers: []*kspb.Header{{Key: "h", Value: []byte("hv")}, {Key: "n", ValueNull: true}}},
		{Topic: "t", Offset: 0, TimestampMs: -1, KeyNull: true, ValueNull: true, AckId: "id2", Attempt: 1},
		{Topic: "u", Key: []byte{}, Value: []byte{}, AckId: "id3", Attempt: 1,
			ValueDecoded: &kspb.Decoded{Json: `{"a":[1,"x"]}`, Format: "avro", SchemaId: 7},
			KeyDecoded:   &kspb.Decoded{SchemaId: 9, DecodeError: "unknown schema id 9"}},
	}
	buf, _ := proto.Marshal(&kspb.SubscribeResponse{Kind: &kspb.SubscribeResponse_Batch{Batch: &kspb.RecordBatch{Records: recs}}})
	kind, body, err := respKind(buf)
	if err != nil || kind != 1 {
		t.Fatalf("respKind: %d %v", kind, err)
	}
	b := &leaseBatch{}
	if err := decodeBatch(nil, b, body); err != nil || len(b.msgs) != 3 {
		t.Fatalf("decodeBatch: %v, %d messages", err, len(b.msgs))
	}
	m := &b.msgs[0]
	if m.Topic != "t" || m.Partition != 3 || m.Offset != 1<<40 || m.Timestamp.UnixMilli() != 1796001086491 ||
		string(m.Key) != "k" || string(m.Value) != "v" || m.AckID != "id1" || m.Attempt != 2 ||
		len(m.Headers) != 2 || string(m.Headers[0].Value) != "hv" || m.Headers[1].Value != nil {
		t.Fatalf("record 0: %+v", m)
	}
	if m := &b.msgs[1]; m.Key != nil || m.Value != nil || !m.Timestamp.IsZero() || m.AckID != "id2" {
		t.Fatalf("record 1 (nulls): %+v", m)
	}
	if m := &b.msgs[2]; m.Key == nil || m.Value == nil || len(m.Key) != 0 || m.Topic != "u" {
		t.Fatalf("record 2 (empty, not null): %+v", m)
	}
	var v struct{ A []any }
	if err := b.msgs[2].ValueJSON(&v); err != nil || len(v.A) != 2 || v.A[1] != "x" ||
		b.msgs[2].ValueDecoded.Format != "avro" || b.msgs[2].ValueDecoded.SchemaID != 7 {
		t.Fatalf("record 2's value_decoded: %v %+v %+v", err, v, b.msgs[2].ValueDecoded)
	}
	var de *DecodeError
	if err := b.msgs[2].KeyJSON(&v); !errors.As(err, &de) || de.Reason != "unknown schema id 9" {
		t.Fatalf("record 2's key_decoded: %v", err)
	}
	if err := b.msgs[0].ValueJSON(&v); err != ErrNotDecoded {
		t.Fatalf("record 0 has no value_decoded: %v", err)
	}
	if cap(b.msgs[0].Key) != 1 {
		t.Fatalf("a key's slice may grow into the buffer: cap %d", cap(b.msgs[0].Key))
	}
	res, _ := proto.Marshal(&kspb.SubscribeResponse{Kind: &kspb.SubscribeResponse_AckResults{AckResults: &kspb.AckResults{
		Results: []*kspb.AckResult{{AckId: "id1", Status: kspb.AckStatus_ACCEPTED}, {AckId: "id2", Status: kspb.AckStatus_STALE, Message: "gone"}}}}})
	kind, body, _ = respKind(res)
	ars, acc, err := decodeAckResults(body, nil)
	if kind != 4 || err != nil || len(ars) != 2 || acc != 0 || string(ars[1].id) != "id2" || ars[1].status != AckStale ||
		string(ars[1].msg) != "gone" || ars[0].status != AckAccepted {
		t.Fatalf("ack results: %d %v %+v", kind, err, ars)
	}
	if _, _, err := respKind([]byte{0x0a, 0x10}); err == nil {
		t.Fatal("a truncated response decoded")
	}
}

func TestAckRangeRequest(t *testing.T) {
	id := func(p, off, attempt int, topic string) string {
		return fmt.Sprintf("a1%08x%08x-3-%d-%d-%d-%s", 0xdeadbeef, 0x12345678, p, off, attempt, topic)
	}
	ids := []string{
		id(2, 1000, 1, "de-mo"), id(2, 1001, 1, "de-mo"), id(2, 1002, 1, "de-mo"), // a run
		id(5, 7, 1, "de-mo"),                             // another partition
		id(2, 1003, 2, "de-mo"),                          // next offset, another attempt: not joined
		id(2, 1004, 2, "de-mo"), id(2, 1006, 2, "de-mo"), // a gap
		"not-an-id", id(1, 0, 1, "x"), id(1, 1, 1, "x"),
	}
	want := []string{
		"a1deadbeef12345678-3-2-1000~1002-1-de-mo", id(5, 7, 1, "de-mo"),
		"a1deadbeef12345678-3-2-1003~1004-2-de-mo", id(2, 1006, 2, "de-mo"),
		"not-an-id", "a1deadbeef12345678-3-1-0~1-1-x",
	}
	wantBuf, _ := proto.Marshal(&kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Ack{
		Ack: &kspb.AckIds{AckIds: want, ResultsByPosition: true}}})
	if got := ackRangeRequest(ids).buf; !bytes.Equal(got, wantBuf) {
		var req kspb.SubscribeRequest
		_ = proto.Unmarshal(got, &req)
		t.Fatalf("ackRangeRequest sent %v", req.GetAck())
	}
	// Concurrent handlers: partitions interleaved, a partition's offsets out of order.
	ids = []string{
		id(0, 10, 1, "t"), id(1, 20, 1, "t"), id(0, 12, 1, "t"), id(1, 21, 1, "t"), "other",
		id(0, 11, 1, "t"), id(1, 23, 1, "t"), id(0, 13, 1, "t"), id(1, 22, 1, "t"), id(0, 15, 1, "t"),
	}
	want = []string{"a1deadbeef12345678-3-0-10~13-1-t", id(0, 15, 1, "t"),
		"a1deadbeef12345678-3-1-20~23-1-t", "other"}
	wantBuf, _ = proto.Marshal(&kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Ack{
		Ack: &kspb.AckIds{AckIds: want, ResultsByPosition: true}}})
	if got := ackRangeRequest(ids).buf; !bytes.Equal(got, wantBuf) {
		var req kspb.SubscribeRequest
		_ = proto.Unmarshal(got, &req)
		t.Fatalf("interleaved: ackRangeRequest sent %v", req.GetAck())
	}
	res, _ := proto.Marshal(&kspb.SubscribeResponse{Kind: &kspb.SubscribeResponse_AckResults{AckResults: &kspb.AckResults{
		Accepted: 9, Results: []*kspb.AckResult{{AckId: "id2", Status: kspb.AckStatus_NOT_FOUND, Position: 3}}}}})
	_, body, _ := respKind(res)
	ars, acc, err := decodeAckResults(body, nil)
	if err != nil || acc != 9 || len(ars) != 1 || string(ars[0].id) != "id2" || ars[0].status != AckNotFound {
		t.Fatalf("by position: %v %d %+v", err, acc, ars)
	}
}
