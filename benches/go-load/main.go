// go-load: a closed-loop load generator on the official Go driver, for
// benches/proxy.rs (`--go`): the driver most production traffic comes
// from, beside the benchmark's own raw-wire generator.
//
//	go-load -uri mongodb://127.0.0.1:27017/?directConnection=true \
//	        -workload find|insert -conns 16 -seconds 2 -warmup 0.3
//
// Prints one JSON line: {"ops":…, "seconds":…, "latency_us": [[µs, count],
// …], "errors":…}. Figures only; it asserts nothing.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func main() {
	uri := flag.String("uri", "", "the MongoDB URI to load")
	workload := flag.String("workload", "find", "find (one document by _id) or insert (1 KiB)")
	conns := flag.Int("conns", 16, "concurrent operations (and pooled connections)")
	seconds := flag.Float64("seconds", 2, "measured duration")
	warmup := flag.Float64("warmup", 0.3, "unmeasured duration first")
	flag.Parse()
	if *uri == "" || (*workload != "find" && *workload != "insert") {
		fmt.Fprintln(os.Stderr, "go-load: -uri is required; -workload is find or insert")
		os.Exit(2)
	}

	opts := options.Client().ApplyURI(*uri).
		SetMaxPoolSize(uint64(*conns)).
		SetMinPoolSize(uint64(*conns))
	client, err := mongo.Connect(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-load: connect:", err)
		os.Exit(1)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	coll := client.Database("bench").Collection("c")
	pad := make([]byte, 1000)
	for i := range pad {
		pad[i] = 'x'
	}
	doc := bson.D{{Key: "pad", Value: string(pad)}}
	op := func(ctx context.Context, i int) error {
		if *workload == "insert" {
			_, err := coll.InsertOne(ctx, doc)
			return err
		}
		var out bson.Raw
		return coll.FindOne(ctx, bson.D{{Key: "_id", Value: i}}).Decode(&out)
	}

	var measuring atomic.Bool
	var errors atomic.Int64
	stop := time.Now().Add(time.Duration((*warmup + *seconds) * float64(time.Second)))
	latencies := make([][]time.Duration, *conns)
	var wg sync.WaitGroup
	for c := 0; c < *conns; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			ctx := context.Background()
			for i := 0; time.Now().Before(stop); i++ {
				start := time.Now()
				if err := op(ctx, i); err != nil {
					errors.Add(1)
					continue
				}
				if measuring.Load() {
					latencies[c] = append(latencies[c], time.Since(start))
				}
			}
		}(c)
	}
	time.Sleep(time.Duration(*warmup * float64(time.Second)))
	measuring.Store(true)
	began := time.Now()
	wg.Wait()
	elapsed := time.Since(began).Seconds()

	var all []time.Duration
	for _, l := range latencies {
		all = append(all, l...)
	}
	// Latencies in µs to three significant digits, as [value, count] pairs
	// (what an HdrHistogram at 3 digits keeps).
	counts := map[int64]int64{}
	for _, d := range all {
		us := d.Microseconds()
		scale := int64(1)
		for us/scale >= 1000 {
			scale *= 10
		}
		counts[us/scale*scale]++
	}
	pairs := make([][2]int64, 0, len(counts))
	for v, n := range counts {
		pairs = append(pairs, [2]int64{v, n})
	}
	sort.Slice(pairs, func(a, b int) bool { return pairs[a][0] < pairs[b][0] })
	out, _ := json.Marshal(map[string]any{
		"ops":        len(all),
		"seconds":    elapsed,
		"latency_us": pairs,
		"errors":     errors.Load(),
	})
	fmt.Println(string(out))
}
