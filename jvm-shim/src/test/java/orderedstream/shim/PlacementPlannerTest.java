package orderedstream.shim;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class PlacementPlannerTest {

    private static final ExecutorSlot E0 = new ExecutorSlot("0", "10.0.0.1");
    private static final ExecutorSlot E1 = new ExecutorSlot("1", "10.0.0.2");
    private static final ExecutorSlot E2 = new ExecutorSlot("2", "10.0.0.2");

    private static Map<String, Integer> loads(Map<String, ExecutorSlot> plan) {
        Map<String, Integer> load = new HashMap<>();
        plan.values().forEach(slot -> load.merge(slot.executorId(), 1, Integer::sum));
        return load;
    }

    @Test
    void newKeysAreSpreadEvenly() {
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("t-0", "t-1", "t-2", "t-3"), Map.of(), List.of(E1, E0));
        assertEquals(List.of("t-0", "t-1", "t-2", "t-3"), new ArrayList<>(plan.keySet()));
        assertEquals(Map.of("0", 2, "1", 2), loads(plan));
        assertEquals(E0, plan.get("t-0"), "ties go to the first executor in id order");
        assertEquals(E1, plan.get("t-1"));
    }

    @Test
    void oddCountDiffersByAtMostOne() {
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c", "d", "e"), Map.of(), List.of(E0, E1, E2));
        Map<String, Integer> load = loads(plan);
        assertEquals(5, plan.size());
        int max = Collections.max(load.values());
        int min = Collections.min(load.values());
        assertTrue(max - min <= 1, "loads " + load);
        assertEquals(3, load.size());
    }

    @Test
    void keysStayOnTheExecutorThatCommittedThem() {
        Map<String, String> last = Map.of("a", "1", "b", "1", "c", "0", "d", "0");
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c", "d"), last, List.of(E0, E1));
        assertEquals(E1, plan.get("a"));
        assertEquals(E1, plan.get("b"));
        assertEquals(E0, plan.get("c"));
        assertEquals(E0, plan.get("d"));
    }

    @Test
    void keysOfALostExecutorMoveToTheLiveOnes() {
        Map<String, String> last = Map.of("a", "0", "b", "1", "c", "0", "d", "1");
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c", "d"), last, List.of(E0));
        plan.values().forEach(slot -> assertEquals(E0, slot));
        assertEquals(4, plan.size());
    }

    @Test
    void orphansAreSpreadOverTheSurvivors() {
        // Executor 1 is gone; its keys b, d go to the less loaded survivors, a and c stay.
        Map<String, String> last = Map.of("a", "0", "b", "1", "c", "2", "d", "1");
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c", "d"), last, List.of(E0, E2));
        assertEquals(E0, plan.get("a"));
        assertEquals(E2, plan.get("c"));
        assertEquals(Map.of("0", 2, "2", 2), loads(plan));
    }

    @Test
    void anExecutorThatJoinsGetsTheKeysOverTheCap() {
        // After a loss all four keys sit on executor 0; executor 2 joins: two move to it,
        // the first two (in the caller's order) stay where their state is.
        Map<String, String> last = Map.of("a", "0", "b", "0", "c", "0", "d", "0");
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c", "d"), last, List.of(E0, E2));
        assertEquals(E0, plan.get("a"));
        assertEquals(E0, plan.get("b"));
        assertEquals(E2, plan.get("c"));
        assertEquals(E2, plan.get("d"));
    }

    @Test
    void newKeysFillTheLessLoadedExecutorFirst() {
        Map<String, String> last = Map.of("a", "0");
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "b", "c"), last, List.of(E0, E1));
        assertEquals(E0, plan.get("a"));
        assertEquals(E1, plan.get("b"));
        assertEquals(Map.of("0", 2, "1", 1), loads(plan));
    }

    @Test
    void noLiveExecutorMeansNoPreference() {
        assertTrue(PlacementPlanner.plan(List.of("a"), Map.of("a", "0"), List.of()).isEmpty());
        assertTrue(PlacementPlanner.plan(List.of(), Map.of(), List.of(E0)).isEmpty());
    }

    @Test
    void duplicateKeysArePlacedOnce() {
        Map<String, ExecutorSlot> plan = PlacementPlanner.plan(
                List.of("a", "a", "b"), Map.of(), List.of(E0, E1));
        assertEquals(2, plan.size());
        assertEquals(E0, plan.get("a"));
        assertEquals(E1, plan.get("b"));
    }

    @Test
    void planIsDeterministicWhateverTheOrderOfExecutors() {
        List<ExecutorSlot> live = new ArrayList<>(List.of(E2, E0, E1));
        Map<String, ExecutorSlot> first = PlacementPlanner.plan(
                List.of("x", "y", "z", "w"), Map.of("w", "2"), live);
        Collections.reverse(live);
        assertEquals(first, PlacementPlanner.plan(
                List.of("x", "y", "z", "w"), Map.of("w", "2"), live));
    }

    @Test
    void staysStickyOverManyBatches() {
        List<String> keys = List.of("p0", "p1", "p2", "p3", "p4", "p5");
        Map<String, String> last = new HashMap<>();
        Map<String, ExecutorSlot> previous = null;
        for (int batch = 0; batch < 5; batch++) {
            Map<String, ExecutorSlot> plan = PlacementPlanner.plan(keys, last, List.of(E0, E1));
            if (previous != null) {
                assertEquals(previous, plan, "batch " + batch);
            }
            plan.forEach((key, slot) -> last.put(key, slot.executorId()));
            previous = plan;
        }
        assertEquals(Map.of("0", 3, "1", 3), loads(previous));
    }
}
