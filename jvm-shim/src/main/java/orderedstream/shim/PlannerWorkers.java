package orderedstream.shim;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.spark.SparkEnv;
import org.apache.spark.api.python.PythonWorker;
import org.apache.spark.api.python.PythonWorkerFactory;

import scala.jdk.javaapi.CollectionConverters;

/**
 * Releases the idle Python worker pools of Spark's planner runs (py4j, driver only).
 *
 * <p>Spark plans a Python Data Source (and analyses Python UDTFs) in short-lived Python runs:
 * the worker modules {@code pyspark.sql.worker.lookup_data_sources},
 * {@code create_data_source}, {@code plan_data_source_read}, ... Each module gets its own
 * {@link PythonWorkerFactory} in {@code SparkEnv}: a {@code pyspark.daemon} process plus the
 * worker it forked, kept idle about a minute (the worker) or until the SparkEnv stops (the
 * daemon). A streaming query plans once, when it starts, so those pools (about 110 MiB of
 * resident memory per module) sit idle for the whole run.
 *
 * <p>{@link #release} stops the daemon and idle workers of every such pool whose workers are
 * all idle, under the SparkEnv's lock ({@code createPythonWorker} and
 * {@code releasePythonWorker} hold it too, so no worker is handed out meanwhile). The factory
 * stays registered: a later planner run (a restarted query, a new query) starts its daemon
 * again, as after Spark's own idle cleanup.
 */
public final class PlannerWorkers {

    /** Module prefix of Spark's planner runs (Data Source and UDTF planning on the driver). */
    public static final String PLANNER_MODULE_PREFIX = "pyspark.sql.worker.";

    private PlannerWorkers() {
    }

    /**
     * Stop the idle pools of worker modules starting with {@code modulePrefix} in this JVM's
     * SparkEnv; returns the worker modules whose pools were stopped (empty when there is no
     * SparkEnv, no such pool, or every such pool has a worker in use).
     */
    public static List<String> release(String modulePrefix) throws ReflectiveOperationException {
        if (modulePrefix == null || modulePrefix.isEmpty()) {
            throw new IllegalArgumentException(
                "modulePrefix must name a module prefix such as '" + PLANNER_MODULE_PREFIX + "'");
        }
        List<String> released = new ArrayList<>();
        SparkEnv env = SparkEnv.get();
        if (env == null) {
            return released;
        }
        synchronized (env) {
            for (Map.Entry<Object, PythonWorkerFactory> entry
                    : factories(env).entrySet()) {
                String module = workerModule(entry.getKey());
                PythonWorkerFactory factory = entry.getValue();
                if (module == null || !module.startsWith(modulePrefix)) {
                    continue;
                }
                synchronized (factory) {
                    if (allIdle(factory) && hasProcesses(factory)) {
                        factory.stop();
                        // The stopped workers stay in the factory's weak maps until collected;
                        // drop them now so that they are not taken for workers in use later.
                        forget(factory, "daemonWorkers");
                        forget(factory, "simpleWorkers");
                        released.add(module);
                    }
                }
            }
        }
        return released;
    }

    /** {@link #release} of Spark's planner pools ({@link #PLANNER_MODULE_PREFIX}). */
    public static List<String> releasePlanners() throws ReflectiveOperationException {
        return release(PLANNER_MODULE_PREFIX);
    }

    /**
     * Worker modules that have a pool in this JVM's SparkEnv now, with their live workers (idle
     * or in use; not those whose socket is closed).
     */
    public static Map<String, Integer> pools() throws ReflectiveOperationException {
        Map<String, Integer> out = new java.util.TreeMap<>();
        SparkEnv env = SparkEnv.get();
        if (env == null) {
            return out;
        }
        synchronized (env) {
            for (Map.Entry<Object, PythonWorkerFactory> entry
                    : factories(env).entrySet()) {
                int live = 0;
                for (String name : new String[] {"daemonWorkers", "simpleWorkers"}) {
                    for (Object worker : workers(entry.getValue(), name)) {
                        live += isLive(worker) ? 1 : 0;
                    }
                }
                out.merge(workerModule(entry.getKey()), live, Integer::sum);
            }
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<Object, PythonWorkerFactory> factories(SparkEnv env)
            throws ReflectiveOperationException {
        // private in Scala: SparkEnv.pythonWorkers, a mutable.HashMap guarded by env.
        Field field = SparkEnv.class.getDeclaredField("pythonWorkers");
        field.setAccessible(true);
        Object map = field.get(env);
        return CollectionConverters.asJava(
            (scala.collection.mutable.Map<Object, PythonWorkerFactory>) map);
    }

    /** The worker module of a {@code SparkEnv.PythonWorkersKey} (a private case class). */
    private static String workerModule(Object key) throws ReflectiveOperationException {
        java.lang.reflect.Method method = key.getClass().getMethod("workerModule");
        method.setAccessible(true);
        return (String) method.invoke(key);
    }

    /**
     * True when every live worker the factory has handed out is back in its idle queue. A
     * worker whose socket is closed is gone, not in use: Spark's idle monitor closes a worker
     * idle for a minute and takes it off the queue, but it stays in the factory's weak map
     * until a garbage collection; counted as busy, it kept its pool from ever being released.
     */
    private static boolean allIdle(PythonWorkerFactory factory) throws ReflectiveOperationException {
        List<PythonWorker> idle = new ArrayList<>(CollectionConverters.asJava(factory.idleWorkers()));
        for (String name : new String[] {"daemonWorkers", "simpleWorkers"}) {
            for (Object worker : workers(factory, name)) {
                if (isLive(worker) && !idle.contains(worker)) {
                    return false;
                }
            }
        }
        return true;
    }

    /** False for a worker whose socket Spark closed (stopped, or closed by the idle monitor). */
    private static boolean isLive(Object worker) {
        return !(worker instanceof PythonWorker) || ((PythonWorker) worker).channel().isOpen();
    }

    /** True when the factory has a daemon process or any worker to stop. */
    private static boolean hasProcesses(PythonWorkerFactory factory)
            throws ReflectiveOperationException {
        Field daemon = PythonWorkerFactory.class.getDeclaredField("daemon");
        daemon.setAccessible(true);
        if (daemon.get(factory) != null || !factory.idleWorkers().isEmpty()) {
            return true;
        }
        for (Object worker : workers(factory, "simpleWorkers")) {
            if (isLive(worker)) {
                return true;
            }
        }
        return false;
    }

    /** Empty the factory's map of workers {@code name}: called only once they are stopped. */
    private static void forget(PythonWorkerFactory factory, String name)
            throws ReflectiveOperationException {
        Field field = PythonWorkerFactory.class.getDeclaredField(name);
        field.setAccessible(true);
        ((scala.collection.mutable.Map<?, ?>) field.get(factory)).clear();
    }

    @SuppressWarnings("unchecked")
    private static java.util.Set<Object> workers(PythonWorkerFactory factory, String name)
            throws ReflectiveOperationException {
        Field field = PythonWorkerFactory.class.getDeclaredField(name);
        field.setAccessible(true);
        scala.collection.mutable.Map<Object, Object> map =
            (scala.collection.mutable.Map<Object, Object>) field.get(factory);
        return new java.util.HashSet<>(CollectionConverters.asJava(map).keySet());
    }
}
