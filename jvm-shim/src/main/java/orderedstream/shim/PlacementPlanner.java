package orderedstream.shim;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Decides which executor each state partition (identified by a caller's string key) should run
 * on in the next batch. Pure Java, no Spark types: unit-tested on its own.
 *
 * <p>Rules, in order:
 * <ol>
 *   <li>A key whose last executor is alive stays there (its state copy is local there), as long
 *       as that executor holds no more than {@code ceil(keys / liveExecutors)} keys of this
 *       batch; the keys over that cap (the later ones in the caller's order) are moved, so an
 *       executor that joined after a loss gets work again.</li>
 *   <li>Every other key (new, its executor gone, or over the cap) goes to the live executor with
 *       the fewest keys so far; ties go to the first executor in {@link ExecutorSlot} order.</li>
 * </ol>
 * The result is deterministic for the same inputs. With no live executor it is empty (no
 * preference: Spark places the tasks).
 */
public final class PlacementPlanner {

    private PlacementPlanner() {
    }

    /**
     * @param keys         the state keys of this batch, in partition order (duplicates ignored)
     * @param lastExecutor key -> executor id that last committed the key's state
     * @param live         the executors alive now
     * @return key -> executor chosen for it, in the order of {@code keys}
     */
    public static Map<String, ExecutorSlot> plan(List<String> keys, Map<String, String> lastExecutor,
                                                 Collection<ExecutorSlot> live) {
        Map<String, ExecutorSlot> plan = new LinkedHashMap<>();
        if (live.isEmpty() || keys.isEmpty()) {
            return plan;
        }
        TreeSet<ExecutorSlot> slots = new TreeSet<>(live);
        Map<String, ExecutorSlot> byId = new HashMap<>();
        for (ExecutorSlot slot : slots) {
            byId.putIfAbsent(slot.executorId(), slot);
        }
        List<String> distinct = new ArrayList<>(new LinkedHashSet<>(keys));
        int cap = (distinct.size() + byId.size() - 1) / byId.size();
        Map<ExecutorSlot, Integer> load = new HashMap<>();
        for (ExecutorSlot slot : byId.values()) {
            load.put(slot, 0);
        }
        List<String> unplaced = new ArrayList<>();
        for (String key : distinct) {
            ExecutorSlot sticky = byId.get(lastExecutor.get(key));
            if (sticky != null && load.get(sticky) < cap) {
                plan.put(key, sticky);
                load.merge(sticky, 1, Integer::sum);
            } else {
                unplaced.add(key);
            }
        }
        for (String key : unplaced) {
            ExecutorSlot best = null;
            for (ExecutorSlot slot : slots) {
                if (!byId.get(slot.executorId()).equals(slot)) {
                    continue; // same id twice (should not happen): keep the first
                }
                if (best == null || load.get(slot) < load.get(best)) {
                    best = slot;
                }
            }
            plan.put(key, best);
            load.merge(best, 1, Integer::sum);
        }
        Map<String, ExecutorSlot> ordered = new LinkedHashMap<>();
        for (String key : distinct) {
            ordered.put(key, plan.get(key));
        }
        return ordered;
    }
}
