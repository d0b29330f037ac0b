import java.io.PrintStream;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * A Java kafka-clients 4.x transactional producer (transaction version 2 when the broker finalizes it):
 * TransactionsV2 BOOTSTRAP TOPIC TRANSACTIONAL_ID COUNT GROUP
 *
 * Runs COUNT transactions, each writing "v2-I-P" to partitions 0 and 1 of TOPIC; every third also sends
 * offset I of partition 0 for GROUP; every fourth aborts, the others commit. Then reads both partitions
 * read_committed to their end. Prints one JSON line per step, ending with {"op": "done"}.
 */
public final class TransactionsV2 {
    @SuppressWarnings("removal")  // a group given by name, as a copy app without a consumer of its own would
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1], transactionalId = a[2], group = a[4];
        int count = Integer.parseInt(a[3]);
        PrintStream out = System.out;
        System.setOut(System.err); // console loggers write to stderr; stdout carries results only
        out.println("{\"op\": \"start\", \"version\": \"" + AppInfoParser.getVersion() + "\"}");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", transactionalId);
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            for (int i = 0; i < count; i++) {
                producer.beginTransaction();
                for (int partition = 0; partition < 2; partition++) {
                    producer.send(new ProducerRecord<>(topic, partition, null, ("v2-" + i + "-" + partition).getBytes()));
                }
                if (i % 3 == 0) {
                    producer.sendOffsetsToTransaction(Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(i)),
                                                      new ConsumerGroupMetadata(group));
                }
                boolean commit = i % 4 != 3;
                if (commit) {
                    producer.commitTransaction();
                } else {
                    producer.abortTransaction();
                }
                out.println("{\"op\": \"txn\", \"i\": " + i + ", \"committed\": " + commit + "}");
            }
        }
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        List<String> values = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            List<TopicPartition> partitions = List.of(new TopicPartition(topic, 0), new TopicPartition(topic, 1));
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> ends = consumer.endOffsets(partitions);
            long deadline = System.currentTimeMillis() + 30_000;
            while (partitions.stream().anyMatch(tp -> consumer.position(tp) < ends.get(tp))) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("read_committed did not reach " + ends);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    values.add("\"" + new String(r.value()) + "\"");
                }
            }
        }
        out.println("{\"op\": \"read\", \"values\": [" + String.join(", ", values) + "]}");
        out.println("{\"op\": \"done\"}");
    }
}
