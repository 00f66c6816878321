package orderedstream.shim;

import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;

import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.scheduler.TaskInfo;
import org.apache.spark.storage.RDDInfo;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Driver-side listener: for every stage that computes a {@link PreferredLocationsRDD} named
 * {@code orderedstream-placement:<tag>}, remembers which executor ran each partition
 * successfully. This is how executors "report back" where a partition's state was committed:
 * a successful task of the ordered stage wrote its state on the executor it ran on.
 *
 * <p>Runs on Spark's listener bus thread; reads come from py4j threads, hence the locks.
 * Bounded: it keeps the most recent {@value #MAX_TAGS} tags and stages.
 */
final class PlacementRecorder extends SparkListener {

    static final int MAX_TAGS = 256;

    private final Map<Integer, String> tagByStage = bounded();
    private final Map<String, Map<Integer, String>> executorsByTag = bounded();

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted event) {
        try {
            for (RDDInfo info : CollectionConverters.asJava(event.stageInfo().rddInfos())) {
                String name = info.name();
                if (name != null && name.startsWith(StickyPlacement.RDD_NAME_PREFIX)) {
                    synchronized (this) {
                        tagByStage.put(event.stageInfo().stageId(),
                                name.substring(StickyPlacement.RDD_NAME_PREFIX.length()));
                    }
                }
            }
        } catch (RuntimeException ignored) {
            // A listener must never disturb the listener bus; a missed stage only costs locality.
        }
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd event) {
        try {
            TaskInfo info = event.taskInfo();
            if (info == null || !info.successful()) {
                return;
            }
            synchronized (this) {
                String tag = tagByStage.get(event.stageId());
                if (tag != null) {
                    executorsByTag.computeIfAbsent(tag, t -> new HashMap<>())
                            .put(info.partitionId(), info.executorId());
                }
            }
        } catch (RuntimeException ignored) {
            // See onStageSubmitted.
        }
    }

    /** Partition index -> executor id of the successful tasks seen for {@code tag} (removed). */
    synchronized Map<Integer, String> take(String tag) {
        Map<Integer, String> seen = executorsByTag.remove(tag);
        return seen == null ? Map.of() : seen;
    }

    /** Like {@link #take} but leaves the record in place. */
    synchronized Map<Integer, String> peek(String tag) {
        Map<Integer, String> seen = executorsByTag.get(tag);
        return seen == null ? Map.of() : new HashMap<>(seen);
    }

    private static <K, V> Map<K, V> bounded() {
        return new LinkedHashMap<>() {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<K, V> eldest) {
                return size() > MAX_TAGS;
            }
        };
    }
}
