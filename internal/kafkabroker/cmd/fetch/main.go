// Command fetch copies the jars of the Apache Kafka broker that Runnel's end-to-end tests run
// (internal/kafkabroker) from Maven Central into ~/.cache/runnel/kafka-VERSION, or $RUNNEL_KAFKA_HOME. It
// needs Maven (mvn) on PATH, and does nothing when the jars are already there.
//
//	go run ./internal/kafkabroker/cmd/fetch
package main

import (
	"fmt"
	"os"

	"github.com/runnel-dev/runnel/internal/kafkabroker"
)

func main() {
	home, err := kafkabroker.Fetch(os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("Apache Kafka %s jars in %s\n", kafkabroker.Version, home)
}
