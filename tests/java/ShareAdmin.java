import java.io.PrintStream;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.ListShareGroupOffsetsSpec;
import org.apache.kafka.clients.admin.ShareGroupDescription;
import org.apache.kafka.clients.admin.SharePartitionOffsetInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.AppInfoParser;

/**
 * Java kafka-clients 4.x Admin on share groups (KIP-932):
 * ShareAdmin BOOTSTRAP GROUP OP..., each OP (its arguments after colons) one of
 *   list                      {"op": "group", group_id, type, state} per share group
 *   describe                  {"op": "described", group_id, state, members}
 *   offsets                   {"op": "offset", topic, partition, start_offset, lag} per share partition
 *   alter:TOPIC:P:OFFSET      {"op": "altered"}
 *   delete-offsets:TOPIC      {"op": "deleted-offsets"}
 *   delete-group              {"op": "deleted-group"}
 * run in turn; a failed call prints {"op": "error", "error": the exception's class} and the next goes on.
 * Every run ends with {"op": "done"}.
 */
public final class ShareAdmin {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], group = a[1];
        PrintStream out = System.out;
        System.setOut(System.err);
        out.println("{\"op\": \"start\", \"version\": \"" + AppInfoParser.getVersion() + "\"}");
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            for (int i = 2; i < a.length; i++) {
                run(admin, group, a[i].split(":"), out);
            }
        }
        out.println("{\"op\": \"done\"}");
    }

    private static void run(Admin admin, String group, String[] a, PrintStream out) throws Exception {
        try {
            switch (a[0]) {
                case "list" -> {
                    for (GroupListing g : admin.listGroups(ListGroupsOptions.forShareGroups()).all().get()) {
                        out.println("{\"op\": \"group\", \"group_id\": \"" + g.groupId() + "\", \"type\": \""
                                + g.type().map(Object::toString).orElse("") + "\", \"state\": \""
                                + g.groupState().map(Object::toString).orElse("") + "\"}");
                    }
                }
                case "describe" -> {
                    ShareGroupDescription d = admin.describeShareGroups(List.of(group)).all().get().get(group);
                    out.println("{\"op\": \"described\", \"group_id\": \"" + d.groupId() + "\", \"state\": \""
                            + d.groupState() + "\", \"members\": " + d.members().size() + "}");
                }
                case "offsets" -> {
                    Map<TopicPartition, SharePartitionOffsetInfo> offsets = admin.listShareGroupOffsets(
                            Map.of(group, new ListShareGroupOffsetsSpec())).partitionsToOffsetInfo(group).get();
                    for (var e : offsets.entrySet()) {
                        SharePartitionOffsetInfo info = e.getValue();
                        out.println("{\"op\": \"offset\", \"topic\": \"" + e.getKey().topic() + "\", \"partition\": "
                                + e.getKey().partition() + ", \"start_offset\": "
                                + (info == null ? -1 : info.startOffset()) + ", \"lag\": "
                                + (info == null ? -1 : info.lag().orElse(-1L)) + "}");
                    }
                }
                case "alter" -> {
                    admin.alterShareGroupOffsets(group, Map.of(new TopicPartition(a[1], Integer.parseInt(a[2])),
                            Long.parseLong(a[3]))).all().get();
                    out.println("{\"op\": \"altered\"}");
                }
                case "delete-offsets" -> {
                    admin.deleteShareGroupOffsets(group, Set.of(a[1])).all().get();
                    out.println("{\"op\": \"deleted-offsets\"}");
                }
                case "delete-group" -> {
                    admin.deleteShareGroups(List.of(group)).all().get();
                    out.println("{\"op\": \"deleted-group\"}");
                }
                default -> throw new IllegalArgumentException(a[0]);
            }
        } catch (java.util.concurrent.ExecutionException e) {
            out.println("{\"op\": \"error\", \"error\": \"" + e.getCause().getClass().getSimpleName() + "\"}");
        }
    }
}
