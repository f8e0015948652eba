// A Kafka group member on the Java client (kafka-clients 4.x), for tests: args BOOTSTRAP
// GROUP TOPIC [INSTANCE_ID [SESSION_MS]]. It subscribes with the client's default assignors (a static
// member with group.instance.id INSTANCE_ID if given) and polls until killed, printing its
// sorted assignment ("topic:partition,...") each time it changes. SESSION_MS: its
// session.timeout.ms (6000 unless given).

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class KafkaGroupMember {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[1]);
        props.put("session.timeout.ms", args.length > 4 ? args[4] : "6000");
        props.put("heartbeat.interval.ms", "500");
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        if (args.length > 3) {
            props.put("group.instance.id", args[3]);
        }
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
                props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(args[2]));
            String last = null;
            while (true) {
                consumer.poll(Duration.ofMillis(200));
                String owned = consumer.assignment().stream()
                        .map(tp -> tp.topic() + ":" + tp.partition()).sorted()
                        .collect(Collectors.joining(","));
                if (!owned.equals(last)) {
                    System.out.println("owned " + owned);
                    System.out.flush();
                    last = owned;
                }
            }
        }
    }
}
