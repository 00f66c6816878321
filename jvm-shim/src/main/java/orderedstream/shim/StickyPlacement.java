package orderedstream.shim;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeoutException;

import org.apache.spark.SparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.scheduler.TaskScheduler;
import org.apache.spark.scheduler.TaskSchedulerImpl;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.classic.Dataset;
import org.apache.spark.storage.BlockManagerId;

import scala.jdk.javaapi.CollectionConverters;

/**
 * The shim's entry point from Python (py4j): executor-sticky placement of state partitions.
 *
 * <p>One instance per SparkContext, on the driver. It remembers, per state key, the executor
 * that last committed the key's state; {@link #prefer} plans the next batch with
 * {@link PlacementPlanner} and returns the batch's rows with matching preferred locations;
 * {@link #commit} learns from the driver's listener where each partition actually ran.
 */
public final class StickyPlacement {

    /** Name prefix of the placement RDD; the rest of the name is the caller's batch tag. */
    public static final String RDD_NAME_PREFIX = "orderedstream-placement:";

    /** Task local property set on executors: the id of the executor running the task. */
    public static final String EXECUTOR_ID_PROPERTY = "orderedstream.executor.id";

    private static StickyPlacement current;

    private final SparkContext sc;
    private final PlacementRecorder recorder = new PlacementRecorder();
    private final Map<String, String> executorByKey = new ConcurrentHashMap<>();
    private final Map<String, Map<Integer, String>> keysByTag = boundedSynchronized();
    private final Map<String, Map<Integer, String>> plannedByTag = boundedSynchronized();

    private StickyPlacement(SparkContext sc) {
        this.sc = sc;
        sc.addSparkListener(recorder);
    }

    /** The instance for this session's SparkContext (created, and its listener added, once). */
    public static StickyPlacement forSession(SparkSession session) {
        return forContext(session.sparkContext());
    }

    /** The instance for {@code sc}; a new one when the SparkContext was replaced. */
    public static synchronized StickyPlacement forContext(SparkContext sc) {
        if (current == null || current.sc != sc) {
            if (current != null && !current.sc.isStopped()) {
                current.sc.removeSparkListener(current.recorder);
            }
            current = new StickyPlacement(sc);
        }
        return current;
    }

    /** The shim's version (from the jar's manifest), or "dev" when run from classes. */
    public static String version() {
        String version = StickyPlacement.class.getPackage().getImplementationVersion();
        return version == null ? "dev" : version;
    }

    /**
     * Executors the task scheduler considers alive now, as executor id -> host, in
     * {@link ExecutorSlot} order. The driver counts only in local mode, where it is the executor.
     */
    public Map<String, String> liveExecutors() {
        Map<String, String> out = new LinkedHashMap<>();
        for (ExecutorSlot slot : liveSlots()) {
            out.put(slot.executorId(), slot.host());
        }
        return out;
    }

    List<ExecutorSlot> liveSlots() {
        TreeSet<ExecutorSlot> slots = new TreeSet<>();
        TaskScheduler scheduler = sc.taskScheduler();
        if (scheduler instanceof TaskSchedulerImpl impl) {
            synchronized (impl) {
                for (Map.Entry<String, String> entry
                        : CollectionConverters.asJava(impl.executorIdToHost()).entrySet()) {
                    if (impl.isExecutorAlive(entry.getKey())) {
                        slots.add(new ExecutorSlot(entry.getKey(), entry.getValue()));
                    }
                }
            }
        }
        if (slots.isEmpty() && sc.isLocal()) {
            // Before the first task the local scheduler may not have offered its executor yet.
            for (BlockManagerId id
                    : CollectionConverters.asJava(sc.env().blockManager().master().getMemoryStatus())
                    .keySet()) {
                slots.add(new ExecutorSlot(id.executorId(), id.host()));
            }
        }
        if (!sc.isLocal()) {
            slots.removeIf(slot -> slot.executorId().equals("driver"));
        }
        return new ArrayList<>(slots);
    }

    /**
     * {@code df}'s rows with a preferred executor per partition, for the batch named {@code tag}.
     *
     * @param df            the batch (any DataFrame; its partitions are the state partitions)
     * @param partitionKeys partition index -> state key (partitions without a key get no
     *                      preference)
     * @param tag           names this batch for {@link #commit}; unique per batch and stage
     * @return a DataFrame over the same rows and partitions; run the stateful stage on it with
     *         narrow operators (mapInArrow) so its tasks inherit the preference
     */
    public Dataset<Row> prefer(Dataset<Row> df, Map<Integer, String> partitionKeys, String tag) {
        if (tag == null || tag.isEmpty()) {
            throw new IllegalArgumentException("tag must be a non-empty string naming the batch");
        }
        RDD<InternalRow> rows = df.queryExecution().toRdd();
        int partitions = rows.getNumPartitions();
        Map<Integer, String> keys = new LinkedHashMap<>();
        new TreeSet<>(partitionKeys.keySet()).forEach(index -> {
            String key = partitionKeys.get(index);
            if (index == null || index < 0 || index >= partitions) {
                throw new IllegalArgumentException("partition index " + index + " (key " + key
                        + ") is not a partition of this DataFrame: it has " + partitions
                        + " partitions, 0.." + (partitions - 1));
            }
            if (key == null || key.isEmpty()) {
                throw new IllegalArgumentException("partition " + index
                        + " has no state key: keys must be non-empty strings");
            }
            keys.put(index, key);
        });
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                new ArrayList<>(keys.values()), executorByKey, liveSlots());
        Map<Integer, String> locations = new HashMap<>();
        Map<Integer, String> planned = new LinkedHashMap<>();
        keys.forEach((index, key) -> {
            ExecutorSlot slot = plan.get(key);
            if (slot != null) {
                locations.put(index, slot.location());
                planned.put(index, slot.executorId());
            }
        });
        keysByTag.put(tag, keys);
        plannedByTag.put(tag, planned);
        RDD<InternalRow> placed = new PreferredLocationsRDD(rows, locations)
                .setName(RDD_NAME_PREFIX + tag);
        return df.sparkSession().internalCreateDataFrame(placed, df.schema(), false);
    }

    /** Partition index -> executor id that {@link #prefer} chose for the batch {@code tag}. */
    public Map<Integer, String> planned(String tag) {
        Map<Integer, String> planned = plannedByTag.get(tag);
        return planned == null ? Map.of() : new LinkedHashMap<>(planned);
    }

    /**
     * Partition index -> executor id of the successful tasks of batch {@code tag} seen so far,
     * after waiting (at most {@code timeoutMillis}) for the listener bus to drain.
     */
    public Map<Integer, String> observed(String tag, long timeoutMillis) {
        drain(timeoutMillis);
        return recorder.peek(tag);
    }

    /**
     * Call after batch {@code tag} committed: remembers, for each of its keys, the executor its
     * successful task ran on (where the state now lives). Returns key -> executor id learned.
     */
    public Map<String, String> commit(String tag, long timeoutMillis) {
        drain(timeoutMillis);
        Map<Integer, String> ran = recorder.take(tag);
        Map<Integer, String> keys = keysByTag.remove(tag);
        plannedByTag.remove(tag);
        Map<String, String> learned = new LinkedHashMap<>();
        if (keys != null) {
            ran.forEach((index, executor) -> {
                String key = keys.get(index);
                if (key != null) {
                    learned.put(key, executor);
                }
            });
        }
        executorByKey.putAll(learned);
        return learned;
    }

    /** Remembers key -> executor id given by the caller (e.g. from its tasks' commit messages). */
    public void commitLocations(Map<String, String> executorIdByKey) {
        executorIdByKey.forEach((key, executor) -> {
            if (key != null && executor != null) {
                executorByKey.put(key, executor);
            }
        });
    }

    /** Key -> executor id that last committed it, as remembered now. */
    public Map<String, String> locations() {
        return new HashMap<>(executorByKey);
    }

    /** Forgets every key that starts with {@code prefix} (all keys for ""). */
    public void forget(String prefix) {
        executorByKey.keySet().removeIf(key -> key.startsWith(prefix));
    }

    private void drain(long timeoutMillis) {
        try {
            sc.listenerBus().waitUntilEmpty(Math.max(1L, timeoutMillis));
        } catch (TimeoutException e) {
            // Use what the listener saw so far; unknown keys are spread again next batch.
        }
    }

    private static <V> Map<String, V> boundedSynchronized() {
        return java.util.Collections.synchronizedMap(new LinkedHashMap<>() {
            private static final long serialVersionUID = 1L;

            @Override
            protected boolean removeEldestEntry(Map.Entry<String, V> eldest) {
                return size() > PlacementRecorder.MAX_TAGS;
            }
        });
    }
}
