// Publisher: produces records through ksidecar's Producer.Produce.
package ksidecar

import (
	"context"
	"fmt"
	"strings"

	"ksidecar/clients/go/kspb"
)

// ProducerRecord is one record to produce. Partition < 0 (or HasPartition false)
// partitions by key; a nil Key or Value is a null one.
//
// With ValueSchemaID, or ValueSubject (and ValueSchemaVersion, a number or "latest", the
// default), Value is JSON text instead, which ksidecar writes with that schema of the schema
// registry in Confluent's wire format (Avro or JSON Schema); a value that does not fit is
// the record's error, naming the field.
type ProducerRecord struct {
	Topic              string
	Partition          int32
	HasPartition       bool
	Key                []byte
	Value              []byte
	Headers            []Header
	ValueSchemaID      int32
	ValueSubject       string
	ValueSchemaVersion string
}

// ProduceResult says where a record landed, or Err why it did not.
type ProduceResult struct {
	Partition int32
	Offset    int64
	Err       error
}

// Publisher is safe for concurrent use.
type Publisher struct{ c *Client }

// Publisher makes a Publisher on this connection.
func (c *Client) Publisher() *Publisher { return &Publisher{c: c} }

// Publish produces recs in one request and returns each one's result, in order. The
// error is a call failure (the results are then nil), or an ErrProduce when any record
// failed (the results say which).
func (p *Publisher) Publish(ctx context.Context, recs ...ProducerRecord) ([]ProduceResult, error) {
	req := &kspb.ProduceRequest{Records: make([]*kspb.ProduceRecord, len(recs))}
	for i, r := range recs {
		pr := &kspb.ProduceRecord{Topic: r.Topic, Partition: -1, Key: r.Key, KeyNull: r.Key == nil,
			Value: r.Value, ValueNull: r.Value == nil}
		if r.ValueSchemaID != 0 || r.ValueSubject != "" {
			pr.Value, pr.ValueNull = nil, false
			pr.ValueJson, pr.ValueSchemaId = string(r.Value), r.ValueSchemaID
			pr.ValueSubject, pr.ValueSchemaVersion = r.ValueSubject, r.ValueSchemaVersion
		}
		if r.HasPartition && r.Partition >= 0 {
			pr.Partition, pr.HasPartition = r.Partition, true
		}
		for _, h := range r.Headers {
			pr.Headers = append(pr.Headers, &kspb.ProduceHeader{Key: h.Key, Value: h.Value})
		}
		req.Records[i] = pr
	}
	resp, err := p.c.producer.Produce(ctx, req)
	if err != nil {
		return nil, wrapErr("produce", p.c.target, err)
	}
	out := make([]ProduceResult, len(resp.Results))
	var failed []string
	for i, r := range resp.Results {
		out[i] = ProduceResult{Partition: r.Partition, Offset: r.Offset}
		if r.Error != "" {
			topic := ""
			if i < len(recs) {
				topic = recs[i].Topic
			}
			out[i].Err = &Error{Kind: KindProduce, Op: "produce", Target: p.c.target,
				Msg: fmt.Sprintf("record %d to %q: %s", i, topic, r.Error)}
			failed = append(failed, out[i].Err.(*Error).Msg)
		}
	}
	if len(failed) > 0 {
		return out, &Error{Kind: KindProduce, Op: "produce", Target: p.c.target,
			Msg: fmt.Sprintf("%d of %d records failed: %s", len(failed), len(recs),
				strings.Join(failed[:min(3, len(failed))], "; "))}
	}
	return out, nil
}
