// Example: produce a few records through ksidecar, then consume them with a Subscriber.
//
//	go run ./example -target 127.0.0.1:50051 -group demo-group -topic demo -n 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	ksidecar "ksidecar/clients/go"
)

func main() {
	target := flag.String("target", "127.0.0.1:50051", "ksidecar gRPC address")
	group := flag.String("group", "demo-group", "consumer group")
	topic := flag.String("topic", "demo", "topic")
	n := flag.Int("n", 3, "records to produce, then consume")
	token := flag.String("token", "", "bearer token, when ksidecar has auth.tokens_file")
	flag.Parse()

	ctx := context.Background()
	c, err := ksidecar.Dial(ctx, *target, ksidecar.WithToken(*token))
	if err != nil {
		log.Fatal(err) // e.g. ksidecar: dial at ...: unavailable: no ksidecar answered within 10s ...
	}
	defer c.Close()

	var recs []ksidecar.ProducerRecord
	for i := 0; i < *n; i++ {
		recs = append(recs, ksidecar.ProducerRecord{Topic: *topic,
			Key: []byte(fmt.Sprintf("user-%d", i)), Value: []byte(fmt.Sprintf(`{"n":%d}`, i))})
	}
	res, err := c.Publisher().Publish(ctx, recs...)
	if err != nil {
		log.Fatal(err)
	}
	for i, r := range res {
		fmt.Printf("produced %s -> partition %d offset %d\n", recs[i].Key, r.Partition, r.Offset)
	}

	sub, err := c.Subscriber(ksidecar.SubscriberConfig{Group: *group, Topics: []string{*topic}})
	if err != nil {
		log.Fatal(err)
	}
	rctx, stop := context.WithTimeout(ctx, 60*time.Second)
	defer stop()
	var got atomic.Int64
	err = sub.Receive(rctx, func(_ context.Context, m *ksidecar.Message) {
		fmt.Printf("%s[%d]@%d key=%s value=%s attempt=%d\n", m.Topic, m.Partition, m.Offset,
			m.Key, m.Value, m.Attempt)
		r := m.AckWithResult() // or m.Ack(): batched on the wire either way
		go func() {
			st, _ := r.Get(context.Background())
			fmt.Printf("ack %s: %v\n", m.AckID, st)
			if got.Add(1) == int64(*n) {
				stop() // Receive sends what is pending, waits for the results, returns
			}
		}()
	})
	if err != nil {
		log.Fatal(err) // typed: errors.Is(err, ksidecar.ErrUnauthenticated), ...
	}
	fmt.Println("closed")
}
