import java.io.FileReader;
import java.io.IOException;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.Future;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Apache Kafka's Java client (kafka-clients 4.x) against raylog's Kafka listener, driven by
 * tests/integration/test_kafka_clients.py. Each command prints one JSON object per line on
 * stdout (bytes as hex) and exits 0; any failure is an exception and a non-zero exit.
 *
 * <pre>
 * produce BOOTSTRAP TOPIC N BASE_TS   idempotent, acks=all, keyed records with headers and
 *                               explicit timestamps, the default partitioner; one line per record:
 *                               {"i", "partition", "offset"}
 * consume BOOTSTRAP TOPIC GROUP N   subscribe in GROUP, poll until N records, commitSync,
 *                               a line per record, then {"committed": {partition: offset}}
 * admin BOOTSTRAP TOPIC         create TOPIC (3 partitions), describe it and its configs,
 *                               list groups, delete it: one line per step
 * </pre>
 *
 * Record i has key "key-i", value "value-i-" repeated 3 times, timestamp BASE_TS + i,
 * headers ("n", "i") and ("empty", "").
 *
 * When the environment names a properties file in KAFKA_CLIENT_PROPERTIES, its entries are
 * added to every client's configuration (security.protocol, sasl.*, ssl.*).
 */
public final class KafkaClientsCheck {
    private static final HexFormat HEX = HexFormat.of();
    private static final Duration WAIT = Duration.ofSeconds(120);

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce" -> produce(args[1], args[2], Integer.parseInt(args[3]),
                                      Long.parseLong(args[4]));
            case "consume" -> consume(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "admin" -> admin(args[1], args[2]);
            default -> throw new IllegalArgumentException("unknown command " + args[0]);
        }
    }

    /** props with the entries of the file KAFKA_CLIENT_PROPERTIES names, if it names one. */
    private static Properties withClientProperties(Properties props) throws IOException {
        String file = System.getenv("KAFKA_CLIENT_PROPERTIES");
        if (file != null && !file.isEmpty()) {
            try (Reader in = new FileReader(file, StandardCharsets.UTF_8)) {
                props.load(in);
            }
        }
        return props;
    }

    private static String quote(String s) {
        return "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }

    private static String hex(byte[] bytes) {
        return bytes == null ? "null" : quote(HEX.formatHex(bytes));
    }

    private static byte[] utf8(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static void produce(String bootstrap, String topic, int n, long baseTs)
            throws Exception {
        Properties props = new Properties();
        props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ProducerConfig.ACKS_CONFIG, "all");
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        props.put(ProducerConfig.LINGER_MS_CONFIG, "5");
        props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "120000");
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        withClientProperties(props);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                List<Header> headers = List.of(new RecordHeader("n", utf8(Integer.toString(i))),
                                               new RecordHeader("empty", new byte[0]));
                sent.add(producer.send(new ProducerRecord<>(
                    topic, null, baseTs + i, utf8("key-" + i),
                    utf8(("value-" + i + "-").repeat(3)), headers)));
            }
            producer.flush();
            for (int i = 0; i < n; i++) {
                RecordMetadata meta = sent.get(i).get();
                System.out.println("{\"i\": " + i + ", \"partition\": " + meta.partition()
                                   + ", \"offset\": " + meta.offset() + "}");
            }
        }
    }

    private static void consume(String bootstrap, String topic, String group, int n)
            throws IOException {
        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        withClientProperties(props);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            int seen = 0;
            long deadline = System.nanoTime() + WAIT.toNanos();
            while (seen < n) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("read " + seen + " of " + n + " records");
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen++;
                    StringBuilder headers = new StringBuilder("[");
                    for (Header h : r.headers()) {
                        headers.append(headers.length() > 1 ? ", " : "").append("[")
                               .append(quote(h.key())).append(", ").append(hex(h.value()))
                               .append("]");
                    }
                    System.out.println("{\"key\": " + hex(r.key()) + ", \"value\": "
                                       + hex(r.value()) + ", \"headers\": " + headers + "]"
                                       + ", \"timestamp\": " + r.timestamp()
                                       + ", \"timestamp_type\": " + quote(r.timestampType().name)
                                       + ", \"partition\": " + r.partition()
                                       + ", \"offset\": " + r.offset() + "}");
                }
            }
            consumer.commitSync(WAIT);
            Set<TopicPartition> owned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(owned, WAIT);
            StringBuilder out = new StringBuilder("{\"committed\": {");
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : committed.entrySet()) {
                out.append(out.length() > 15 ? ", " : "").append(quote(
                    Integer.toString(e.getKey().partition()))).append(": ")
                   .append(e.getValue() == null ? "null" : e.getValue().offset());
            }
            System.out.println(out.append("}}"));
        }
    }

    private static void admin(String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "120000");
        try (Admin admin = Admin.create(withClientProperties(props))) {
            admin.createTopics(List.of(new NewTopic(topic, 3, (short) 1))).all().get();
            System.out.println("{\"created\": " + quote(topic) + "}");

            TopicDescription described =
                admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            StringBuilder parts = new StringBuilder("[");
            for (TopicPartitionInfo p : described.partitions()) {
                parts.append(parts.length() > 1 ? ", " : "").append("{\"partition\": ")
                     .append(p.partition()).append(", \"leader\": ")
                     .append(p.leader() == null ? "null" : p.leader().id())
                     .append(", \"replicas\": ").append(p.replicas().size()).append("}");
            }
            System.out.println("{\"described\": " + parts + "]}");

            ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            StringBuilder configs = new StringBuilder("{");
            for (ConfigEntry entry : config.entries()) {
                configs.append(configs.length() > 1 ? ", " : "").append(quote(entry.name()))
                       .append(": ").append(entry.value() == null ? "null"
                                            : quote(entry.value()));
            }
            System.out.println("{\"configs\": " + configs + "}}");

            Collection<GroupListing> groups = admin.listGroups().all().get();
            StringBuilder names = new StringBuilder("[");
            for (GroupListing g : groups) {
                names.append(names.length() > 1 ? ", " : "").append(quote(g.groupId()));
            }
            System.out.println("{\"groups\": " + names + "]}");

            admin.deleteTopics(List.of(topic)).all().get();
            System.out.println("{\"deleted\": " + quote(topic) + "}");
        }
    }
}
