// The Subscribe stream's receive side decoded straight from the wire: one buffer per
// SubscribeResponse, records pointing into it, no per-record allocation.
package ksidecar

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawResponse is a SubscribeResponse left undecoded (wire.go decodes it).
type rawResponse struct{ buf []byte }

// streamCodec is the Subscribe call's codec: protobuf for what we send, the raw
// bytes for rawResponse. Named "proto", so the wire's content type does not change.
type streamCodec struct{}

func (streamCodec) Name() string { return "proto" }

func (streamCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawRequest); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.buf)}, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, errors.New("ksidecar: streamCodec cannot marshal a non-proto message")
	}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (streamCodec) Unmarshal(data mem.BufferSlice, v any) error {
	switch m := v.(type) {
	case *rawResponse:
		m.buf = data.Materialize() // a copy: the records may outlive grpc's buffers
		return nil
	case proto.Message:
		return proto.Unmarshal(data.Materialize(), m)
	}
	return errors.New("ksidecar: streamCodec cannot unmarshal into this type")
}

var _ encoding.CodecV2 = streamCodec{}

// rawRequest is a SubscribeRequest already encoded (ackRequest makes them).
type rawRequest struct{ buf []byte }

// ackRequest encodes SubscribeRequest{ack: AckIds{ack_ids}} by hand: it is the one
// message sent per few hundred records, and the generic marshal costs more than this.
func ackRequest(ids []string) *rawRequest { return encodeAck(ids, false) }

// encodeAck writes SubscribeRequest{ack: AckIds{ack_ids, results_by_position}}.
func encodeAck(ids []string, byPos bool) *rawRequest {
	body := 0
	if byPos {
		body = protowire.SizeTag(4) + 1
	}
	for _, id := range ids {
		body += protowire.SizeTag(1) + protowire.SizeBytes(len(id))
	}
	b := make([]byte, 0, protowire.SizeTag(2)+protowire.SizeBytes(body))
	b = protowire.AppendTag(b, 2, protowire.BytesType) // SubscribeRequest.ack
	b = protowire.AppendVarint(b, uint64(body))
	for _, id := range ids {
		b = protowire.AppendTag(b, 1, protowire.BytesType) // AckIds.ack_ids
		b = protowire.AppendString(b, id)
	}
	if byPos {
		b = protowire.AppendTag(b, 4, protowire.VarintType) // AckIds.results_by_position
		b = protowire.AppendVarint(b, 1)
	}
	return &rawRequest{buf: b}
}

// ackIDOffset finds the offset in an ack id, "a1<16 hex digits>-<epoch>-<partition>-
// <offset>-<attempt>-<topic>": its start and end, and the offset; ok false for an id of
// another form (it is then sent as it is).
func ackIDOffset(id string) (start, end int, off uint64, ok bool) {
	if len(id) < 20 || id[0] != 'a' || id[1] != '1' || id[18] != '-' {
		return 0, 0, 0, false
	}
	i := 19
	for f := 0; f < 2; f++ { // epoch, partition
		j := strings.IndexByte(id[i:], '-')
		if j <= 0 {
			return 0, 0, 0, false
		}
		i += j + 1
	}
	j := strings.IndexByte(id[i:], '-')
	if j <= 0 {
		return 0, 0, 0, false
	}
	off, err := strconv.ParseUint(id[i:i+j], 10, 63)
	if err != nil {
		return 0, 0, 0, false
	}
	return i, i + j, off, true
}

// ackRangeRequest encodes SubscribeRequest{ack: AckIds{ack_ids, results_by_position}}
// with each run of ids that differ only in consecutive offsets (one partition's records,
// one attempt) sent as one range id, "<first>~<last>" in the offset's place. The ids are
// grouped first (each group where its first id was, its offsets in order): concurrent
// handlers ack the partitions' records interleaved, and often a partition's out of order.
// The answer is then a count of accepted records and, by its own id, each record that was
// not (where an id stands in the message does not matter for plain acks).
func ackRangeRequest(ids []string) *rawRequest {
	type group struct{ pre, post string } // an id's text before and after its offset
	type item struct {
		g   int32 // index in groups; an id of another form has a group of its own
		i   int32 // index in ids
		off uint64
	}
	var groups []group
	var at map[group]int32
	items := make([]item, len(ids))
	last := int32(-1)
	inOrder := true // each group's items together, offsets increasing: as they are
	for i, id := range ids {
		s, e, off, ok := ackIDOffset(id)
		if !ok {
			items[i] = item{g: int32(len(groups)), i: int32(i)}
			groups = append(groups, group{})
			last = -1
			continue
		}
		k := group{id[:s], id[e:]}
		g := last
		switch {
		case g >= 0 && groups[g] == k:
			inOrder = inOrder && off > items[i-1].off
		case len(groups) == 0:
			g = 0
			groups = append(groups, k)
		default:
			if at == nil {
				at = make(map[group]int32)
				for j, x := range groups {
					if x != (group{}) {
						at[x] = int32(j)
					}
				}
			}
			var found bool
			if g, found = at[k]; !found {
				g = int32(len(groups))
				at[k] = g
				groups = append(groups, k)
			} else {
				inOrder = false
			}
		}
		last = g
		items[i] = item{g: g, i: int32(i), off: off}
	}
	if !inOrder {
		// Each group's items together, in the order acked (a stable counting sort), then a
		// group whose offsets are not increasing sorted by offset.
		start := make([]int32, len(groups)+1)
		for _, it := range items {
			start[it.g+1]++
		}
		for g := range groups {
			start[g+1] += start[g]
		}
		byGroup := make([]item, len(items))
		next := slices.Clone(start[:len(groups)])
		for _, it := range items {
			byGroup[next[it.g]] = it
			next[it.g]++
		}
		byOff := func(a, b item) int { return cmp.Compare(a.off, b.off) }
		for g := range groups {
			if grp := byGroup[start[g]:start[g+1]]; !slices.IsSortedFunc(grp, byOff) {
				slices.SortStableFunc(grp, byOff)
			}
		}
		items = byGroup
	}
	entries := make([]string, 0, 8)
	for j := 0; j < len(items); {
		first := items[j]
		k := j + 1
		for groups[first.g] != (group{}) && k < len(items) && items[k].g == first.g &&
			items[k].off == items[k-1].off+1 {
			k++
		}
		if id := ids[first.i]; k == j+1 {
			entries = append(entries, id)
		} else {
			g := groups[first.g]
			entries = append(entries, g.pre+strconv.FormatUint(first.off, 10)+"~"+
				strconv.FormatUint(items[k-1].off, 10)+g.post)
		}
		j = k
	}
	return encodeAck(entries, true)
}

var errMalformed = errors.New("ksidecar: malformed SubscribeResponse from the server")

// field reads one field's number, type and (for bytes) contents or (for varints) value.
func field(b []byte) (num protowire.Number, typ protowire.Type, val []byte, v uint64, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, 0, nil, errMalformed
	}
	b = b[n:]
	switch typ {
	case protowire.BytesType:
		val, n = protowire.ConsumeBytes(b)
	case protowire.VarintType:
		v, n = protowire.ConsumeVarint(b)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return 0, 0, nil, 0, nil, errMalformed
	}
	return num, typ, val, v, b[n:], nil
}

// bytesStr is a string over b without a copy; b is never written to afterwards.
func bytesStr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// capped is b with no room to grow into its neighbours.
func capped(b []byte) []byte { return b[:len(b):len(b)] }

// respKind reads the top field of a SubscribeResponse: its number (1 batch,
// 2 assignment, 3 revocation, 4 ack_results) and body.
func respKind(buf []byte) (protowire.Number, []byte, error) {
	var num protowire.Number
	var body []byte
	for len(buf) > 0 {
		n, typ, val, _, rest, err := field(buf)
		if err != nil {
			return 0, nil, err
		}
		if typ == protowire.BytesType {
			num, body = n, val
		}
		buf = rest
	}
	return num, body, nil
}

// decodeBatch fills Messages from a RecordBatch's bytes.
func decodeBatch(st *stream, b *leaseBatch, body []byte) error {
	n := 0
	for p := body; len(p) > 0; n++ {
		_, _, _, _, rest, err := field(p)
		if err != nil {
			return err
		}
		p = rest
	}
	b.msgs = make([]Message, n)
	i := 0
	var topic string
	for p := body; len(p) > 0; {
		num, typ, rec, _, rest, _ := field(p)
		p = rest
		if num != 1 || typ != protowire.BytesType {
			continue
		}
		m := &b.msgs[i]
		i++
		m.st, m.b = st, b
		if err := decodeRecord(m, rec, &topic); err != nil {
			return err
		}
		if m.chain != 0 {
			b.chained++
		}
	}
	b.msgs = b.msgs[:i]
	return nil
}

func decodeRecord(m *Message, rec []byte, topic *string) error {
	var key, value []byte
	keyNull, valueNull := false, false
	ts := int64(-1)
	for len(rec) > 0 {
		num, _, val, v, rest, err := field(rec)
		if err != nil {
			return err
		}
		rec = rest
		switch num {
		case 1:
			if string(val) != *topic { // no allocation for the comparison
				*topic = string(val)
			}
			m.Topic = *topic
		case 2:
			m.Partition = int32(v)
		case 3:
			m.Offset = int64(v)
		case 4:
			ts = int64(v)
		case 5:
			key = capped(val)
		case 6:
			keyNull = v != 0
		case 7:
			value = capped(val)
		case 8:
			valueNull = v != 0
		case 9:
			h, err := decodeHeader(val)
			if err != nil {
				return err
			}
			m.Headers = append(m.Headers, h)
		case 10:
			m.AckID = bytesStr(val)
		case 11:
			m.Attempt = int(int32(v))
		case 12:
			m.chain = v
		case 13, 14:
			d := &m.KeyDecoded
			if num == 14 {
				d = &m.ValueDecoded
			}
			if *d == nil {
				*d = &Decoded{}
			}
			if err := decodeDecoded(*d, val); err != nil {
				return err
			}
		}
	}
	if !keyNull {
		m.Key = nonNil(key)
	}
	if !valueNull {
		m.Value = nonNil(value)
	}
	if ts >= 0 {
		m.Timestamp = timeUnixMilli(ts)
	}
	m.size = int64(len(key) + len(value))
	if m.AckID == "" {
		return errors.New("ksidecar: a record without an ack id from the server")
	}
	return nil
}

// decodeDecoded reads a Decoded's fields into d (a second occurrence merges, as protobuf's).
func decodeDecoded(d *Decoded, b []byte) error {
	for len(b) > 0 {
		num, _, val, v, rest, err := field(b)
		if err != nil {
			return err
		}
		b = rest
		switch num {
		case 1:
			d.JSON = string(val)
		case 2:
			d.Format = string(val)
		case 3:
			d.SchemaID = int32(v)
		case 4:
			d.Error = string(val)
		}
	}
	return nil
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func decodeHeader(b []byte) (Header, error) {
	var h Header
	var val []byte
	null := false
	for len(b) > 0 {
		num, _, fv, v, rest, err := field(b)
		if err != nil {
			return h, err
		}
		b = rest
		switch num {
		case 1:
			h.Key = string(fv)
		case 2:
			val = capped(fv)
		case 3:
			null = v != 0
		}
	}
	if !null {
		h.Value = nonNil(val)
	}
	return h, nil
}

// ackResult is one AckResult; id points into the response's buffer.
type ackResult struct {
	id        []byte
	status    AckStatus
	msg       []byte
	committed int64 // AckResult.committed_offset
}

// decodeAckResults reads AckResults' bytes into out (reused between calls), and its
// accepted count (an answer by position: out then holds only the records not accepted).
func decodeAckResults(body []byte, out []ackResult) ([]ackResult, int, error) {
	out = out[:0]
	accepted := 0
	for len(body) > 0 {
		num, typ, r, v, rest, err := field(body)
		if err != nil {
			return out, accepted, err
		}
		body = rest
		if num == 2 && typ == protowire.VarintType {
			accepted = int(v)
			continue
		}
		if num != 1 || typ != protowire.BytesType {
			continue
		}
		var ar ackResult
		for len(r) > 0 {
			n, _, val, v, rest, err := field(r)
			if err != nil {
				return out, accepted, err
			}
			r = rest
			switch n {
			case 1:
				ar.id = val
			case 2:
				ar.status = AckStatus(v)
			case 3:
				ar.msg = val
			case 4:
				ar.committed = int64(v)
			}
		}
		out = append(out, ar)
	}
	return out, accepted, nil
}
