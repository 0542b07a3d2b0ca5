// Example: records as JSON lines, values decoded with the schema registry, and JSON values
// produced with a schema of the registry.
//
//	go run ./example/jsonlines -target 127.0.0.1:50051 -group g -topic t -n 3 -value-format avro_plain
//	echo '{"id":1}' | go run ./example/jsonlines -target 127.0.0.1:50051 -topic t -value-schema-id 5
//
// Consuming prints a line a record: {"offset", "value" (the bytes, base64), "value_schema_id",
// "value_json"}, and exits after n. Producing writes each line of stdin as one JSON value and
// prints where it landed.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	ksidecar "ksidecar/clients/go"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "ksidecar gRPC address")
	group := flag.String("group", "", "consumer group: consume n records of topic")
	topic := flag.String("topic", "demo", "topic")
	n := flag.Int("n", 1, "records to consume")
	format := flag.String("value-format", "avro_plain", "value format to consume with")
	schemaID := flag.Int("value-schema-id", 0, "produce stdin's lines with this schema id")
	subject := flag.String("value-subject", "", "or with this subject's latest version")
	flag.Parse()

	ctx := context.Background()
	c, err := ksidecar.Dial(ctx, *target)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if *group == "" {
		produce(ctx, c, *topic, int32(*schemaID), *subject)
		return
	}
	sub, err := c.Subscriber(ksidecar.SubscriberConfig{Group: *group, Topics: []string{*topic},
		ValueFormat: *format})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	var mu sync.Mutex
	got := 0
	out := json.NewEncoder(os.Stdout)
	err = sub.Receive(rctx, func(_ context.Context, m *ksidecar.Message) {
		var v json.RawMessage // the JSON as it came: no number loses digits
		line := map[string]any{"offset": m.Offset, "value": m.Value}
		if err := m.ValueJSON(&v); err != nil {
			line["error"] = err.Error()
		} else {
			line["value_json"], line["value_schema_id"] = v, m.ValueDecoded.SchemaID
		}
		m.Ack()
		mu.Lock()
		defer mu.Unlock()
		if err := out.Encode(line); err != nil {
			log.Fatal(err)
		}
		if got++; got == *n {
			stop()
		}
	})
	if err != nil {
		log.Fatal(err)
	}
	if got < *n {
		log.Fatalf("only %d of %d records came within 60 s", got, *n)
	}
}

func produce(ctx context.Context, c *ksidecar.Client, topic string, id int32, subject string) {
	var recs []ksidecar.ProducerRecord
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	for in.Scan() {
		recs = append(recs, ksidecar.ProducerRecord{Topic: topic, Partition: 0, HasPartition: true,
			Value: append([]byte(nil), in.Bytes()...), ValueSchemaID: id, ValueSubject: subject})
	}
	res, err := c.Publisher().Publish(ctx, recs...)
	if err != nil {
		log.Fatal(err) // names each record that failed, e.g. a field that does not fit
	}
	for _, r := range res {
		fmt.Printf("partition %d offset %d\n", r.Partition, r.Offset)
	}
}
