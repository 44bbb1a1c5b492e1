// Package kafkapub is the relay's Kafka publisher: a Watermill publisher
// over a Sarama producer, with watermill-kafka's message format, set up so
// the relay's ordering and durability hold. It is also a
// relay.BatchPublisher: the relay's lanes hand it many events at once,
// which Sarama sends in few requests.
//
//	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
//	r, err := relay.New(db, pub, relay.Config{})
//	err = r.Run(ctx) // until ctx ends
//
// It is a package, and a module, of its own so that a program relaying to
// another broker does not compile Sarama, nor carry it in its module graph.
package kafkapub
