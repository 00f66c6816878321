package orderedstream.shim;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.List;
import java.util.TreeSet;

import org.junit.jupiter.api.Test;

class ExecutorSlotTest {

    @Test
    void locationIsSparksExecutorCacheTaskLocationString() {
        assertEquals("executor_127.0.0.1_3", new ExecutorSlot("3", "127.0.0.1").location());
    }

    @Test
    void numericIdsSortNumericallyBeforeOthers() {
        TreeSet<ExecutorSlot> slots = new TreeSet<>(List.of(
                new ExecutorSlot("10", "h"), new ExecutorSlot("driver", "h"),
                new ExecutorSlot("2", "h"), new ExecutorSlot("1", "h")));
        assertEquals(List.of("1", "2", "10", "driver"),
                slots.stream().map(ExecutorSlot::executorId).toList());
    }
}
