import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeoutException;
import java.util.function.Function;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicCollection;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.quota.ClientQuotaAlteration;
import org.apache.kafka.common.quota.ClientQuotaEntity;
import org.apache.kafka.common.quota.ClientQuotaFilter;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.utils.AppInfoParser;

import static org.apache.kafka.common.IsolationLevel.READ_COMMITTED;
import static org.apache.kafka.common.IsolationLevel.READ_UNCOMMITTED;

/**
 * Java kafka-clients, the client Spark's Kafka source is built on, run against a broker.
 *
 * <pre>java ClientConformance BOOTSTRAP SCENARIO [ARG...]</pre>
 *
 * Scenarios:
 * <pre>
 *   admin TOPIC PARTITIONS                  createTopics (twice), describeTopics (by name, by id, missing),
 *                                           describeCluster
 *   offsets TOPIC                           listOffsets earliest / latest / latest READ_COMMITTED / max timestamp
 *   produce TOPIC PARTITION COUNT CODEC     KafkaProducer defaults, linger + batch.size, one compression codec
 *   consume TOPIC PARTITION ISOLATION TS    assign, seekToBeginning, poll to the end, seek, seekToEnd, offsetsForTimes
 *   transactions TOPIC PARTITION COUNT TXID OUTCOMES   one transaction per outcome (commit,abort,...)
 *   transactionsHeld TOPIC PARTITIONS COUNT TXID HOLD GO   three committed transactions over PARTITIONS
 *                                           partitions; the second, records flushed, creates file HOLD and
 *                                           waits for file GO before its commit; then read_committed reads all
 *   group TOPIC GROUP P=OFFSET[,P=OFFSET]   subscribe, poll, commitSync; a second member resumes there
 *   follow TOPIC PARTITIONS COUNT           assign partitions 0..PARTITIONS-1, poll until COUNT records came
 *   followCount TOPIC PARTITIONS FIRST COUNT   the same, printing no records: "caughtUp" after FIRST records,
 *                                           then the records, duplicates and gaps in offsets once COUNT came
 * </pre>
 *
 * Results are JSON lines on stdout, one object per observation, each with an "op" field; bytes are
 * lowercase hex. Everything the client libraries log goes to stderr. An exception ends the run with
 * exit code 1 after an {"op":"error"} line and a stack trace on stderr.
 */
public final class ClientConformance {
    private static final HexFormat HEX = HexFormat.of();
    private static final Duration POLL = Duration.ofMillis(200);
    private static final long DEADLINE_MS = 60_000;
    private static PrintStream out;

    public static void main(String[] args) {
        out = System.out;
        System.setOut(System.err); // console loggers write to stderr; stdout carries results only
        try {
            if (args.length < 2) {
                throw new IllegalArgumentException("usage: ClientConformance BOOTSTRAP SCENARIO [ARG...]");
            }
            String bootstrap = args[0];
            String scenario = args[1];
            String[] a = Arrays.copyOfRange(args, 2, args.length);
            emit("client", "version", AppInfoParser.getVersion(), "scenario", scenario);
            switch (scenario) {
                case "admin" -> admin(bootstrap, a[0], Integer.parseInt(a[1]));
                case "offsets" -> offsets(bootstrap, a[0]);
                case "produce" -> produce(bootstrap, partition(a[0], a[1]), Integer.parseInt(a[2]), a[3]);
                case "consume" -> consume(bootstrap, partition(a[0], a[1]), a[2], longs(a[3]));
                case "transactions" -> transactions(bootstrap, partition(a[0], a[1]), Integer.parseInt(a[2]), a[3],
                        List.of(a[4].split(",")));
                case "transactionsHeld" -> transactionsHeld(bootstrap, a[0], Integer.parseInt(a[1]),
                        Integer.parseInt(a[2]), a[3], Path.of(a[4]), Path.of(a[5]));
                case "group" -> group(bootstrap, a[0], a[1], a[2]);
                case "alterConfigs" -> alterConfigs(bootstrap, a[0]);
                case "describeConfigs" -> describeConfigs(bootstrap, a[0]);
                case "quotas" -> quotas(bootstrap, a[0]);
                case "deleteRecords" -> deleteRecords(bootstrap, partition(a[0], a[1]), Long.parseLong(a[2]));
                case "follow" -> follow(bootstrap, a[0], Integer.parseInt(a[1]), Integer.parseInt(a[2]));
                case "followCount" -> followCount(bootstrap, a[0], Integer.parseInt(a[1]), Integer.parseInt(a[2]),
                        Integer.parseInt(a[3]));
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
            emit("done");
        } catch (Throwable e) {
            Throwable cause = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
            emit("error", "type", cause.getClass().getName(), "message", String.valueOf(cause.getMessage()));
            e.printStackTrace();
            System.exit(1);
        }
        System.exit(0);
    }

    // ---------------------------------------------------------------- AdminClient

    static void admin(String bootstrap, String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            NewTopic spec = new NewTopic(topic, partitions, (short) 1);
            admin.createTopics(List.of(spec)).all().get();
            emit("createTopics", "topic", topic, "partitions", partitions);
            emit("createTopicsAgain", "error", failure(() -> admin.createTopics(List.of(spec)).all().get()));

            TopicDescription byName = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            emit("describeTopics", describe(byName));
            TopicDescription byId = admin.describeTopics(TopicCollection.ofTopicIds(List.of(byName.topicId())))
                    .allTopicIds().get().get(byName.topicId());
            emit("describeTopicsById", describe(byId));
            emit("describeMissingTopic", "error",
                    failure(() -> admin.describeTopics(List.of(topic + "-missing")).allTopicNames().get()));

            DescribeClusterResult cluster = admin.describeCluster();
            emit("describeCluster", "clusterId", cluster.clusterId().get(),
                    "controller", node(cluster.controller().get()),
                    "nodes", cluster.nodes().get().stream().map(ClientConformance::node).toList());
        }
    }

    /** Creates the topic, then changes it with incrementalAlterConfigs and (the deprecated) alterConfigs. */
    @SuppressWarnings("deprecation")
    static void alterConfigs(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(
                    new AlterConfigOp(new ConfigEntry("retention.ms", "3600000"), AlterConfigOp.OpType.SET),
                    new AlterConfigOp(new ConfigEntry("cleanup.policy", "compact"), AlterConfigOp.OpType.APPEND),
                    new AlterConfigOp(new ConfigEntry("segment.bytes", "100000"), AlterConfigOp.OpType.SET))))
                    .all().get();
            emit("incrementalAlterConfigs", "ok", true);
            emit("incrementalAlterConfigsInvalid", "error", failure(() -> admin.incrementalAlterConfigs(Map.of(
                    resource, List.of(new AlterConfigOp(new ConfigEntry("retention.ms", "-5"),
                            AlterConfigOp.OpType.SET)))).all().get()));
            ConfigResource other = new ConfigResource(ConfigResource.Type.TOPIC, topic + "-whole");
            admin.createTopics(List.of(new NewTopic(other.name(), 1, (short) 1))).all().get();
            admin.alterConfigs(Map.of(other, new Config(List.of(new ConfigEntry("retention.bytes", "123456")))))
                    .all().get();
            emit("alterConfigs", "ok", true);
        }
    }

    /** Client quotas through the Admin API (KIP-546), then a producer held to one: its throttle metric. */
    static void quotas(String bootstrap, String topic) throws Exception {
        ClientQuotaEntity slow = new ClientQuotaEntity(Map.of(ClientQuotaEntity.CLIENT_ID, "java-slow"));
        Map<String, String> anyUser = new java.util.HashMap<>();
        anyUser.put(ClientQuotaEntity.USER, null);  // the default user
        ClientQuotaEntity defaultUser = new ClientQuotaEntity(anyUser);
        try (Admin admin = Admin.create(common(bootstrap))) {
            admin.alterClientQuotas(List.of(
                    new ClientQuotaAlteration(slow, List.of(new ClientQuotaAlteration.Op("producer_byte_rate", 20_000.0))),
                    new ClientQuotaAlteration(defaultUser,
                            List.of(new ClientQuotaAlteration.Op("request_percentage", 500.0))))).all().get();
            var described = admin.describeClientQuotas(ClientQuotaFilter.all()).entities().get();
            for (var e : described.entrySet()) {
                emit("quota", "entity", new TreeMap<>(e.getKey().entries()), "values", new TreeMap<>(e.getValue()));
            }
        }
        Properties props = producerProps(bootstrap);
        props.put("client.id", "java-slow");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (int i = 0; i < 12; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, new byte[10_000])).get();
            }
            double throttle = (double) producer.metrics().entrySet().stream()
                    .filter(m -> m.getKey().name().equals("produce-throttle-time-max"))
                    .findFirst().orElseThrow().getValue().metricValue();
            emit("throttle", "produceThrottleTimeMaxMs", throttle);
        }
    }

    static void describeConfigs(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource),
                    new DescribeConfigsOptions().includeSynonyms(true).includeDocumentation(true))
                    .all().get().get(resource);
            for (ConfigEntry e : config.entries()) {
                emit("config", "name", e.name(), "value", e.value(), "source", e.source().name(),
                        "type", e.type().name(), "readOnly", e.isReadOnly(),
                        "synonyms", e.synonyms().stream()
                                .map(s -> fields("name", s.name(), "value", s.value(), "source", s.source().name()))
                                .toList());
            }
            Map<Integer, Map<String, LogDirDescription>> dirs =
                    admin.describeLogDirs(List.of(1)).allDescriptions().get();
            for (var dir : dirs.get(1).entrySet()) {
                for (var replica : dir.getValue().replicaInfos().entrySet()) {
                    if (replica.getKey().topic().equals(topic)) {
                        ReplicaInfo info = replica.getValue();
                        emit("logDir", "dir", dir.getKey(), "partition", replica.getKey().partition(),
                                "size", info.size(), "totalBytes", dir.getValue().totalBytes().orElse(-1L));
                    }
                }
            }
        }
    }

    static void deleteRecords(String bootstrap, TopicPartition tp, long before) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            long low = admin.deleteRecords(Map.of(tp, RecordsToDelete.beforeOffset(before)))
                    .lowWatermarks().get(tp).get().lowWatermark();
            emit("deleteRecords", "lowWatermark", low);
        }
    }

    static Map<String, Object> describe(TopicDescription d) {
        List<Object> parts = new ArrayList<>();
        for (TopicPartitionInfo p : d.partitions()) {
            parts.add(fields("partition", p.partition(), "leader", p.leader().id(),
                    "replicas", p.replicas().stream().map(Node::id).toList(),
                    "isr", p.isr().stream().map(Node::id).toList()));
        }
        return fields("topic", d.name(), "topicId", d.topicId().toString(), "internal", d.isInternal(),
                "partitions", parts);
    }

    static Map<String, Object> node(Node n) {
        return fields("id", n.id(), "host", n.host(), "port", n.port());
    }

    static void offsets(String bootstrap, String topic) throws Exception {
        try (Admin admin = Admin.create(common(bootstrap))) {
            int n = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            List<TopicPartition> tps = new ArrayList<>();
            for (int p = 0; p < n; p++) {
                tps.add(new TopicPartition(topic, p));
            }
            var earliest = listOffsets(admin, tps, OffsetSpec.earliest(), READ_UNCOMMITTED);
            var latest = listOffsets(admin, tps, OffsetSpec.latest(), READ_UNCOMMITTED);
            var stable = listOffsets(admin, tps, OffsetSpec.latest(), READ_COMMITTED);
            var maxTs = listOffsets(admin, tps, OffsetSpec.maxTimestamp(), READ_UNCOMMITTED);
            for (TopicPartition tp : tps) {
                emit("listOffsets", "partition", tp.partition(), "earliest", earliest.get(tp).offset(),
                        "latest", latest.get(tp).offset(), "latestReadCommitted", stable.get(tp).offset(),
                        "maxTimestampOffset", maxTs.get(tp).offset(), "maxTimestamp", maxTs.get(tp).timestamp());
            }
        }
    }

    static Map<TopicPartition, ListOffsetsResultInfo> listOffsets(
            Admin admin, Collection<TopicPartition> tps, OffsetSpec spec, IsolationLevel isolation) throws Exception {
        Map<TopicPartition, OffsetSpec> request =
                tps.stream().collect(Collectors.toMap(Function.identity(), tp -> spec));
        return admin.listOffsets(request, new ListOffsetsOptions(isolation)).all().get();
    }

    // ---------------------------------------------------------------- KafkaProducer

    /**
     * Idempotence and acks=all are the client's defaults and are left alone; linger.ms and batch.size make
     * multi-record batches.
     */
    static void produce(String bootstrap, TopicPartition tp, int count, String codec) throws Exception {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 50);
        props.put(ProducerConfig.BATCH_SIZE_CONFIG, 16384);
        long baseTimestamp = System.currentTimeMillis() - 3_600_000;
        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            records.add(generated(tp, i, baseTimestamp + i, "k-" + i));
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> acks = records.stream().map(producer::send).toList();
            producer.flush();
            for (int i = 0; i < count; i++) {
                emitAck(records.get(i), acks.get(i).get());
            }
        }
        try (Admin admin = Admin.create(common(bootstrap))) {
            emit("describeProducers", "partition", tp.partition(), "producers", producers(admin, tp));
        }
    }

    /** The partition's active producers as DescribeProducers tells them. */
    static List<Object> producers(Admin admin, TopicPartition tp) throws Exception {
        return admin.describeProducers(List.of(tp)).partitionResult(tp).get().activeProducers().stream()
                .map(s -> (Object) fields("producerId", s.producerId(), "producerEpoch", s.producerEpoch(),
                        "lastSequence", s.lastSequence(),
                        "currentTransactionStartOffset", s.currentTransactionStartOffset().orElse(-1L)))
                .toList();
    }

    /**
     * Record {@code i} of a run: a deterministic, partly compressible value; now and then a null key, a
     * null or empty value, or headers, so those encodings are exercised inside compressed batches too.
     */
    static ProducerRecord<byte[], byte[]> generated(TopicPartition tp, int i, long timestamp, String key) {
        Random rng = new Random(i);
        byte[] noise = new byte[rng.nextInt(40)];
        rng.nextBytes(noise);
        String text = ("value-" + i + "|" + new String(noise, StandardCharsets.ISO_8859_1) + "|")
                + ("payload-" + (i % 7) + " ").repeat(i % 25);
        byte[] value = i % 97 == 5 ? null : i % 101 == 6 ? new byte[0] : text.getBytes(StandardCharsets.ISO_8859_1);
        byte[] k = i % 89 == 7 ? null : key.getBytes(StandardCharsets.UTF_8);
        List<Header> headers = i % 10 == 3
                ? List.of(new RecordHeader("n", String.valueOf(i).getBytes(StandardCharsets.UTF_8)),
                        new RecordHeader("empty", new byte[0]))
                : List.of();
        return new ProducerRecord<>(tp.topic(), tp.partition(), timestamp, k, value, headers);
    }

    static void emitAck(ProducerRecord<byte[], byte[]> r, RecordMetadata m) {
        emit("ack", "partition", m.partition(), "offset", m.offset(), "timestamp", m.timestamp(),
                "key", r.key(), "value", r.value(), "headers", headers(r.headers()));
    }

    // ---------------------------------------------------------------- KafkaConsumer, assigned

    static void consume(String bootstrap, TopicPartition tp, String isolation, List<Long> timestamps) throws Exception {
        Properties props = consumerProps(bootstrap);
        props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        // an offset out of range is an error, not a silent reset
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        List<TopicPartition> tps = List.of(tp);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            long beginning = consumer.beginningOffsets(tps).get(tp);
            long end = consumer.endOffsets(tps).get(tp); // the LSO under read_committed
            emit("bounds", "beginning", beginning, "end", end);

            consumer.seekToBeginning(tps);
            List<ConsumerRecord<byte[], byte[]>> got = pollUntilEnd(consumer, Map.of(tp, end));
            got.forEach(r -> emit("record", record(r)));
            emit("afterPoll", "records", got.size(), "position", consumer.position(tp));

            if (end > beginning) {
                long middle = beginning + (end - beginning) / 2;
                consumer.seek(tp, middle);
                ConsumerRecord<byte[], byte[]> first = firstRecord(consumer, tp, end);
                emit("seek", "to", middle, "firstOffset", first == null ? null : first.offset());
            }
            consumer.seekToEnd(tps);
            emit("seekToEnd", "position", consumer.position(tp));
            consumer.seekToBeginning(tps);
            emit("seekToBeginning", "position", consumer.position(tp));

            Map<TopicPartition, Long> query = new LinkedHashMap<>();
            for (long ts : timestamps) {
                query.put(tp, ts);
                OffsetAndTimestamp found = consumer.offsetsForTimes(query).get(tp);
                emit("offsetsForTimes", "timestamp", ts, "offset", found == null ? null : found.offset(),
                        "recordTimestamp", found == null ? null : found.timestamp());
            }
        }
    }

    /** Records as they are produced into many partitions: the consumer keeps one fetch session open. */
    static void follow(String bootstrap, String topic, int partitions, int count) throws Exception {
        Properties props = consumerProps(bootstrap);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            emit("assigned", "partitions", partitions);
            int seen = 0;
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (seen < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new TimeoutException(seen + " of " + count + " records came; positions " + positions(consumer));
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(POLL)) {
                    emit("record", record(r));
                    seen++;
                }
            }
        }
    }

    /** A consumer with default fetch settings, as a benchmark drives it (bench/java_follow.py). */
    static void followCount(String bootstrap, String topic, int partitions, int first, int count) throws Exception {
        Properties props = consumerProps(bootstrap);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        long[] next = new long[partitions];
        long seen = 0, duplicates = 0, gaps = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long deadline = System.currentTimeMillis() + 10 * DEADLINE_MS;
            boolean caughtUp = false;
            while (seen < count) {
                if (System.currentTimeMillis() > deadline) {
                    throw new TimeoutException(seen + " of " + count + " records came");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(POLL)) {
                    int p = r.partition();
                    if (r.offset() < next[p]) {
                        duplicates++;
                    } else {
                        gaps += r.offset() - next[p];
                        next[p] = r.offset() + 1;
                    }
                    seen++;
                }
                if (!caughtUp && seen >= first) {
                    caughtUp = true;
                    emit("caughtUp", "records", seen);
                    out.flush();
                }
            }
        }
        emit("counted", "records", seen, "duplicates", duplicates, "gaps", gaps);
    }

    /** Poll until every partition's position reaches its end offset; the records seen on the way. */
    static List<ConsumerRecord<byte[], byte[]>> pollUntilEnd(
            KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> ends) throws Exception {
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (!reached(consumer, ends)) {
            if (System.currentTimeMillis() > deadline) {
                throw new TimeoutException("positions " + positions(consumer) + " never reached " + ends
                        + " (" + got.size() + " records seen)");
            }
            consumer.poll(POLL).forEach(got::add);
        }
        return got;
    }

    static boolean reached(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> ends) {
        Set<TopicPartition> assigned = consumer.assignment();
        return assigned.equals(ends.keySet())
                && ends.entrySet().stream().allMatch(e -> consumer.position(e.getKey()) >= e.getValue());
    }

    static Map<String, Long> positions(KafkaConsumer<byte[], byte[]> consumer) {
        Map<String, Long> positions = new TreeMap<>();
        consumer.assignment().forEach(tp -> positions.put(tp.toString(), consumer.position(tp)));
        return positions;
    }

    /** The first record a poll returns, or null if the position reaches {@code end} without one. */
    static ConsumerRecord<byte[], byte[]> firstRecord(
            KafkaConsumer<byte[], byte[]> consumer, TopicPartition tp, long end) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (consumer.position(tp) < end) {
            if (System.currentTimeMillis() > deadline) {
                throw new TimeoutException("no record after position " + consumer.position(tp));
            }
            List<ConsumerRecord<byte[], byte[]>> batch = consumer.poll(POLL).records(tp);
            if (!batch.isEmpty()) {
                return batch.get(0);
            }
        }
        return null;
    }

    // ---------------------------------------------------------------- transactions

    /** One transaction of COUNT records per outcome; the offsets are listed while it is open and after it ends. */
    static void transactions(
            String bootstrap, TopicPartition tp, int count, String transactionalId, List<String> outcomes)
            throws Exception {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.LINGER_MS_CONFIG, 20);
        long baseTimestamp = System.currentTimeMillis() - 3_600_000;
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props);
                Admin admin = Admin.create(common(bootstrap))) {
            producer.initTransactions();
            for (int t = 0; t < outcomes.size(); t++) {
                String outcome = outcomes.get(t);
                producer.beginTransaction();
                List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    records.add(generated(tp, t * count + i, baseTimestamp + t * count + i, "txn-" + t + "-" + i));
                }
                List<Future<RecordMetadata>> acks = records.stream().map(producer::send).toList();
                producer.flush();
                long[] open = endOffsets(admin, tp);
                emit("open", "transaction", t, "latest", open[0], "latestReadCommitted", open[1],
                        "producers", producers(admin, tp));
                switch (outcome) {
                    case "commit" -> producer.commitTransaction();
                    case "abort" -> producer.abortTransaction();
                    default -> throw new IllegalArgumentException("outcome must be commit or abort, not " + outcome);
                }
                for (int i = 0; i < count; i++) {
                    emitAck(records.get(i), acks.get(i).get());
                }
                emit(outcome, "transaction", t);
                long[] ended = endOffsetsOnceStable(admin, tp, open[0]);
                emit("ended", "transaction", t, "latest", ended[0], "latestReadCommitted", ended[1]);
            }
        }
    }

    /**
     * Three transactions of COUNT records per partition, all committed; the second holds before its commit
     * (file HOLD created, until file GO exists) so the test can break the cluster there. Then a
     * read_committed consumer reads every partition from the beginning to the end (the LSO).
     */
    static void transactionsHeld(String bootstrap, String topic, int partitions, int count, String transactionalId,
            Path hold, Path go) throws Exception {
        Properties props = producerProps(bootstrap);
        props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, transactionalId);
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, DEADLINE_MS);
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, (int) DEADLINE_MS);
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) {
            tps.add(new TopicPartition(topic, p));
        }
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.initTransactions();
            for (int t = 0; t < 3; t++) {
                producer.beginTransaction();
                for (TopicPartition tp : tps) {
                    for (int i = 0; i < count; i++) {
                        String value = "t" + t + "-p" + tp.partition() + "-" + i;
                        byte[] bytes = value.getBytes(StandardCharsets.UTF_8);
                        producer.send(new ProducerRecord<>(topic, tp.partition(), null, bytes));
                    }
                }
                producer.flush();
                if (t == 1) {
                    Files.createFile(hold);
                    long deadline = System.currentTimeMillis() + DEADLINE_MS;
                    while (!Files.exists(go)) {
                        if (System.currentTimeMillis() > deadline) {
                            throw new TimeoutException("no " + go);
                        }
                        Thread.sleep(20);
                    }
                }
                producer.commitTransaction();
                emit("committed", "transaction", t);
            }
        }
        Properties consumerProps = consumerProps(bootstrap);
        consumerProps.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(consumerProps)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> ends = consumer.endOffsets(tps);
            // the LSO passes the last commit once its markers are in: wait for all of them
            long deadline = System.currentTimeMillis() + DEADLINE_MS;
            while (ends.values().stream().mapToLong(Long::longValue).sum() < 3L * partitions * (count + 1)) {
                if (System.currentTimeMillis() > deadline) {
                    throw new TimeoutException("end offsets " + ends + " never passed the last commit markers");
                }
                Thread.sleep(100);
                ends = consumer.endOffsets(tps);
            }
            pollUntilEnd(consumer, ends).forEach(r -> emit("record", record(r)));
        }
    }

    /** {latest offset, latest READ_COMMITTED offset (the LSO)}. */
    static long[] endOffsets(Admin admin, TopicPartition tp) throws Exception {
        long latest = listOffsets(admin, List.of(tp), OffsetSpec.latest(), READ_UNCOMMITTED).get(tp).offset();
        long stable = listOffsets(admin, List.of(tp), OffsetSpec.latest(), READ_COMMITTED).get(tp).offset();
        return new long[] {latest, stable};
    }

    /**
     * End offsets once a marker has followed {@code openLatest} and the LSO has caught up with the high
     * watermark (as in Kafka, markers may be written after EndTxn is answered); the last seen at the deadline.
     */
    static long[] endOffsetsOnceStable(Admin admin, TopicPartition tp, long openLatest) throws Exception {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        long[] offsets = endOffsets(admin, tp);
        while (!(offsets[0] > openLatest && offsets[1] == offsets[0]) && System.currentTimeMillis() < deadline) {
            Thread.sleep(50);
            offsets = endOffsets(admin, tp);
        }
        return offsets;
    }

    // ---------------------------------------------------------------- consumer group

    /** A member reads everything, commits the given offsets and leaves; a second member must resume there. */
    static void group(String bootstrap, String topic, String groupId, String commitSpec) throws Exception {
        Map<TopicPartition, OffsetAndMetadata> commits = new LinkedHashMap<>();
        for (String item : commitSpec.split(",")) {
            String[] pair = item.split("=");
            commits.put(partition(topic, pair[0]), new OffsetAndMetadata(Long.parseLong(pair[1])));
        }
        Properties props = consumerProps(bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        Map<TopicPartition, Long> ends;
        try (KafkaConsumer<byte[], byte[]> first = new KafkaConsumer<>(props)) {
            ends = first.endOffsets(first.partitionsFor(topic).stream()
                    .map(p -> new TopicPartition(topic, p.partition())).toList());
            first.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> got = pollUntilEnd(first, ends);
            emit("firstMember", "assignment", partitions(first.assignment()), "records", got.size(),
                    "firstOffsets", firstOffsets(got));
            first.commitSync(commits);
            emit("commitSync", "offsets", offsets(commits));
        }
        try (KafkaConsumer<byte[], byte[]> second = new KafkaConsumer<>(props)) {
            emit("committed", "offsets", offsets(second.committed(commits.keySet())));
            second.subscribe(List.of(topic));
            List<ConsumerRecord<byte[], byte[]>> got = pollUntilEnd(second, ends);
            got.forEach(r -> emit("record", record(r)));
            emit("secondMember", "assignment", partitions(second.assignment()), "records", got.size(),
                    "firstOffsets", firstOffsets(got), "positions", positions(second));
        }
    }

    static List<Integer> partitions(Collection<TopicPartition> tps) {
        return tps.stream().map(TopicPartition::partition).sorted().toList();
    }

    static Map<String, Long> firstOffsets(List<ConsumerRecord<byte[], byte[]>> records) {
        Map<String, Long> first = new TreeMap<>();
        records.forEach(r -> first.putIfAbsent(String.valueOf(r.partition()), r.offset()));
        return first;
    }

    static Map<String, Long> offsets(Map<TopicPartition, OffsetAndMetadata> offsets) {
        Map<String, Long> byPartition = new TreeMap<>();
        offsets.forEach((tp, om) -> byPartition.put(String.valueOf(tp.partition()), om == null ? null : om.offset()));
        return byPartition;
    }

    // ---------------------------------------------------------------- configuration

    static Properties common(String bootstrap) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("client.id", "moldau-java-conformance");
        props.put("request.timeout.ms", 20_000);
        props.put("default.api.timeout.ms", 30_000);
        // security and other settings the test gives every client (JavaClients.run's client_config)
        String extra = System.getProperty("moldau.client.config");
        if (extra != null) {
            try (var reader = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(extra))) {
                props.load(reader);
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        return props;
    }

    static Properties producerProps(String bootstrap) {
        Properties props = common(bootstrap);
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 45_000);
        return props;
    }

    static Properties consumerProps(String bootstrap) {
        Properties props = common(bootstrap);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        return props;
    }

    // ---------------------------------------------------------------- output

    interface Action {
        void run() throws Exception;
    }

    /** The class name of the exception {@code action} fails with (unwrapped from ExecutionException), or "none". */
    static String failure(Action action) {
        try {
            action.run();
            return "none";
        } catch (ExecutionException e) {
            return e.getCause().getClass().getSimpleName();
        } catch (Exception e) {
            return e.getClass().getSimpleName();
        }
    }

    static Map<String, Object> record(ConsumerRecord<byte[], byte[]> r) {
        return fields("partition", r.partition(), "offset", r.offset(), "timestamp", r.timestamp(),
                "timestampType", r.timestampType().name, "key", r.key(), "value", r.value(),
                "headers", headers(r.headers()));
    }

    static List<Object> headers(Iterable<Header> headers) {
        List<Object> list = new ArrayList<>();
        headers.forEach(h -> list.add(Arrays.asList(h.key(), h.value())));
        return list;
    }

    static TopicPartition partition(String topic, String index) {
        return new TopicPartition(topic, Integer.parseInt(index));
    }

    static List<Long> longs(String csv) {
        return csv.isEmpty() || csv.equals("-") ? List.of() : Arrays.stream(csv.split(",")).map(Long::valueOf).toList();
    }

    static Map<String, Object> fields(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }

    /** One result line: {"op": op, ...}; a lone map argument is merged in. */
    static void emit(String op, Object... kv) {
        Map<String, Object> line = new LinkedHashMap<>();
        line.put("op", op);
        if (kv.length == 1 && kv[0] instanceof Map<?, ?> m) {
            m.forEach((k, v) -> line.put((String) k, v));
        } else {
            line.putAll(fields(kv));
        }
        out.println(json(line));
        out.flush();
    }

    static String json(Object v) {
        if (v == null) {
            return "null";
        } else if (v instanceof String s) {
            return quote(s);
        } else if (v instanceof Number || v instanceof Boolean) {
            return v.toString();
        } else if (v instanceof byte[] b) {
            return quote(HEX.formatHex(b));
        } else if (v instanceof Map<?, ?> m) {
            return m.entrySet().stream().map(e -> quote(String.valueOf(e.getKey())) + ":" + json(e.getValue()))
                    .collect(Collectors.joining(",", "{", "}"));
        } else if (v instanceof Collection<?> c) {
            return c.stream().map(ClientConformance::json).collect(Collectors.joining(",", "[", "]"));
        }
        throw new IllegalArgumentException("no JSON form for " + v.getClass());
    }

    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> b.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return b.append('"').toString();
    }
}
