// Package kafkapub is the relay's Kafka publisher: a watermill-kafka
// (Sarama) publisher set up so the relay's ordering and durability hold.
//
//	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
//	r, err := relay.New(db, pub, relay.Config{})
//	err = r.Run(ctx) // until ctx ends
//
// It is a package, and a module, of its own so that a program relaying to
// another broker does not compile Sarama, nor carry it in its module graph.
package kafkapub
