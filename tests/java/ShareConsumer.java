import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * A Java kafka-clients 4.x share consumer (KIP-932) in explicit acknowledgement mode:
 * ShareConsumer BOOTSTRAP GROUP TOPIC IDLE_MS MAX_MS [STOP_FILE]
 *
 * Acknowledges each record by its value: "release-..." is RELEASEd on its first delivery (accepted on a later
 * one), "reject-..." is REJECTed, anything else ACCEPTed; commits after every poll. Polls until it has
 * received something and then nothing for IDLE_MS, or MAX_MS passed, or STOP_FILE exists; then closes.
 * Prints one JSON line per record ({"op": "record", value, offset, delivery_count}), ending with {"op": "done"}.
 */
public final class ShareConsumer {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], group = a[1], topic = a[2];
        long idleMs = Long.parseLong(a[3]), maxMs = Long.parseLong(a[4]);
        java.io.File stopFile = a.length > 5 ? new java.io.File(a[5]) : null;
        PrintStream out = System.out;
        System.setOut(System.err); // console loggers write to stderr; stdout carries results only
        out.println("{\"op\": \"start\", \"version\": \"" + AppInfoParser.getVersion() + "\"}");
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("share.acknowledgement.mode", "explicit");
        c.put("key.deserializer", ByteArrayDeserializer.class.getName());
        c.put("value.deserializer", ByteArrayDeserializer.class.getName());
        long start = System.currentTimeMillis(), lastRecord = 0;
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            while (System.currentTimeMillis() - start < maxMs && (stopFile == null || !stopFile.exists())) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String value = new String(r.value(), StandardCharsets.UTF_8);
                    int count = r.deliveryCount().map(Short::intValue).orElse(-1);
                    out.println("{\"op\": \"record\", \"value\": \"" + value + "\", \"offset\": " + r.offset()
                            + ", \"delivery_count\": " + count + "}");
                    AcknowledgeType type = AcknowledgeType.ACCEPT;
                    if (value.startsWith("release-") && count == 1) {
                        type = AcknowledgeType.RELEASE;
                    } else if (value.startsWith("reject-")) {
                        type = AcknowledgeType.REJECT;
                    }
                    consumer.acknowledge(r, type);
                    lastRecord = System.currentTimeMillis();
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                if (lastRecord > 0 && System.currentTimeMillis() - lastRecord > idleMs) {
                    break;
                }
            }
        }
        out.println("{\"op\": \"done\"}");
    }
}
