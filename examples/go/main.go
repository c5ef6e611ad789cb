// main.go - runs one consumer of the example.
//
//	inbox-example claim|forward|batch|receive|work
//
// Settings come from the environment (see README.md):
//
//	INBOX_APP_URL     URL of the application database (the inbox and invoices)
//	INBOX_BROKER_URL  URL of the simulated broker's database
//	INBOX_SCOPE       the inbox scope, also the broker topic
//	INBOX_LOSE_ACKS   share of acks the simulated broker loses (default 0)
//	INBOX_FAIL_RATE   share of deferred effects that fail (default 0)
//	INBOX_WORK_MS     time each effect takes, simulated (default 0)
//	INBOX_NOTICE_TOPIC  the outbox topic of "forward" (default invoice-booked)
package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"time"
)

func main() {
	ctx := context.Background()
	// Go before 1.20 starts every process with the same random sequence;
	// the simulated lost acks and failures should differ between consumers.
	rand.Seed(time.Now().UnixNano())
	mode := ""
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	appURL := env("INBOX_APP_URL", "")
	scope := env("INBOX_SCOPE", "")
	loseAcks := number(env("INBOX_LOSE_ACKS", "0"))
	failRate := number(env("INBOX_FAIL_RATE", "0"))
	// A delivery not acked within 3 s is delivered again.
	broker := &Broker{url: env("INBOX_BROKER_URL", ""), topic: scope, loseAcks: loseAcks, visibilitySeconds: 3}

	switch mode {
	case "claim":
		(&ClaimConsumer{appURL: appURL, scope: scope, broker: broker}).Run(ctx)
	case "forward":
		(&ClaimConsumer{appURL: appURL, scope: scope, broker: broker,
			noticeTopic: env("INBOX_NOTICE_TOPIC", "invoice-booked")}).Run(ctx)
	case "batch":
		(&BatchConsumer{appURL: appURL, scope: scope, broker: broker}).Run(ctx)
	case "receive":
		(&DeferredReceiver{appURL: appURL, scope: scope, broker: broker}).Run(ctx)
	case "work":
		(&DeferredWorker{appURL: appURL, scope: scope, failRate: failRate}).Run(ctx)
	default:
		fmt.Fprintln(os.Stderr, "usage: inbox-example claim|forward|batch|receive|work")
		os.Exit(2)
	}
}

func env(name, dflt string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	if dflt == "" {
		fmt.Fprintf(os.Stderr, "inbox-example: set %s\n", name)
		os.Exit(2)
	}
	return dflt
}

func number(s string) float64 {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "inbox-example: not a number: %q\n", s)
		os.Exit(2)
	}
	return f
}
