package orderedstream.shim;

import java.util.Comparator;
import java.util.Objects;

/**
 * One live executor as the task scheduler knows it: its id and the host it runs on.
 *
 * <p>Plain data (no Spark types), so the placement logic stays testable without a SparkContext.
 */
public record ExecutorSlot(String executorId, String host) implements Comparable<ExecutorSlot> {

    /** Spark's tag for {@code ExecutorCacheTaskLocation} in preferred-location strings. */
    public static final String LOCATION_TAG = "executor_";

    /** Executors in a stable order: numeric ids numerically ("2" before "10"), then by text. */
    private static final Comparator<ExecutorSlot> ORDER = Comparator
            .comparing((ExecutorSlot slot) -> !isNumeric(slot.executorId))
            .thenComparing(slot -> isNumeric(slot.executorId) ? Long.parseLong(slot.executorId) : 0L)
            .thenComparing(ExecutorSlot::executorId)
            .thenComparing(ExecutorSlot::host);

    public ExecutorSlot {
        Objects.requireNonNull(executorId, "executorId");
        Objects.requireNonNull(host, "host");
    }

    /**
     * The preferred-location string that makes the scheduler treat this executor as
     * PROCESS_LOCAL for a task: {@code executor_<host>_<executorId>} (parsed by
     * {@code TaskLocation.apply} into an {@code ExecutorCacheTaskLocation}).
     */
    public String location() {
        return LOCATION_TAG + host + "_" + executorId;
    }

    @Override
    public int compareTo(ExecutorSlot other) {
        return ORDER.compare(this, other);
    }

    private static boolean isNumeric(String id) {
        if (id.isEmpty() || id.length() > 18) {
            return false;
        }
        for (int i = 0; i < id.length(); i++) {
            if (!Character.isDigit(id.charAt(i))) {
                return false;
            }
        }
        return true;
    }
}
