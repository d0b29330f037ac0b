import java.io.PrintStream;
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * A Java kafka-clients 4.x consumer with group.protocol=consumer (KIP-848):
 * ConsumerProtocol BOOTSTRAP GROUP SUBSCRIPTION INSTANCE_ID IDLE_MS MAX_MS [STOP_FILE]
 *
 * SUBSCRIPTION is a comma-separated topic list, or a regex the broker resolves when it starts with "re:" (a
 * SubscriptionPattern, KIP-848's subscribed_topic_regex). INSTANCE_ID "-" is a
 * dynamic member. Polls, committing synchronously after every poll that returned records, until it has
 * owned partitions and received nothing for IDLE_MS, or MAX_MS passed, or STOP_FILE exists; then closes
 * (leaves the group). Prints one JSON line per record, assignment, revocation and failed commit, ending with
 * {"op": "done"}. The system property moldau.client.config names a properties file of more client configs.
 */
public final class ConsumerProtocol {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], group = a[1], subscription = a[2], instanceId = a[3];
        long idleMs = Long.parseLong(a[4]), maxMs = Long.parseLong(a[5]);
        java.io.File stopFile = a.length > 6 ? new java.io.File(a[6]) : null;
        PrintStream out = System.out;
        System.setOut(System.err); // console loggers write to stderr; stdout carries results only
        out.println("{\"op\": \"start\", \"version\": \"" + AppInfoParser.getVersion() + "\"}");
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");
        c.put("auto.offset.reset", "earliest");
        c.put("enable.auto.commit", "false");
        if (!instanceId.equals("-")) {
            c.put("group.instance.id", instanceId);
        }
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        String extra = System.getProperty("moldau.client.config");  // e.g. group.protocol=classic
        if (extra != null) {
            try (var reader = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(extra))) {
                c.load(reader);
            }
        }
        ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                if (!partitions.isEmpty()) {
                    out.println("{\"op\": \"revoked\", \"partitions\": " + json(partitions) + ", \"t\": " + now() + "}");
                }
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                out.println("{\"op\": \"assigned\", \"partitions\": " + json(partitions) + ", \"t\": " + now() + "}");
            }
        };
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c)) {
            if (subscription.startsWith("re:")) {
                consumer.subscribe(new SubscriptionPattern(subscription.substring(3)), listener);  // the broker's regex
            } else {
                consumer.subscribe(List.of(subscription.split(",")), listener);
            }
            long start = System.currentTimeMillis(), last = start;
            while (System.currentTimeMillis() - start < maxMs && (stopFile == null || !stopFile.exists())) {
                var records = consumer.poll(Duration.ofMillis(100));
                StringBuilder batch = new StringBuilder();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    out.println("{\"op\": \"record\", \"topic\": \"" + r.topic() + "\", \"p\": " + r.partition()
                                + ", \"o\": " + r.offset() + ", \"t\": " + now() + "}");
                    batch.append(batch.length() > 0 ? ", " : "").append("[\"").append(r.topic()).append("\", ")
                         .append(r.partition()).append(", ").append(r.offset()).append("]");
                }
                if (!records.isEmpty()) {
                    try {
                        consumer.commitSync();
                    } catch (CommitFailedException | RebalanceInProgressException e) {
                        // a classic member's group moved on meanwhile: these records were not committed
                        out.println("{\"op\": \"commit_failed\", \"records\": [" + batch + "]}");
                    }
                    last = System.currentTimeMillis();
                } else if (!consumer.assignment().isEmpty() && System.currentTimeMillis() - last > idleMs) {
                    break;
                }
            }
        }
        out.println("{\"op\": \"done\"}");
    }

    private static long now() {
        return System.currentTimeMillis();
    }

    private static String json(Collection<TopicPartition> partitions) {
        StringBuilder b = new StringBuilder("[");
        for (TopicPartition tp : partitions) {
            b.append(b.length() > 1 ? ", " : "").append("[\"").append(tp.topic()).append("\", ").append(tp.partition()).append("]");
        }
        return b.append("]").toString();
    }
}
