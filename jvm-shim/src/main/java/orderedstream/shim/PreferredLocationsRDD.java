package orderedstream.shim;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.OneToOneDependency;
import org.apache.spark.Partition;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;

import scala.collection.Iterator;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

/**
 * Its parent's rows, partition for partition (a one-to-one dependency), plus a preferred
 * location per partition. Narrow operators after it (mapInArrow, mapPartitions) keep the
 * preference: the DAGScheduler walks narrow dependencies to find one.
 *
 * <p>Where code runs: {@link #getPreferredLocations} on the driver (the map is transient and
 * never shipped); {@link #compute} on executors, where it also writes the executor's id into the
 * task's local properties ({@link StickyPlacement#EXECUTOR_ID_PROPERTY}) so a Python task
 * downstream can name the executor its state now lives on.
 */
public final class PreferredLocationsRDD extends RDD<InternalRow> {

    private static final long serialVersionUID = 1L;

    private static final ClassTag<InternalRow> ROW_TAG = ClassTag$.MODULE$.apply(InternalRow.class);

    private final RDD<InternalRow> parent;
    private final transient Map<Integer, String> locations;

    /**
     * @param parent    the rows to pass through
     * @param locations partition index -> preferred location string
     *                  ({@code executor_<host>_<id>}); partitions not in it have no preference
     */
    public PreferredLocationsRDD(RDD<InternalRow> parent, Map<Integer, String> locations) {
        super(parent.sparkContext(),
                CollectionConverters.asScala(List.<org.apache.spark.Dependency<?>>of(
                        new OneToOneDependency<>(parent))).toList(),
                ROW_TAG);
        this.parent = parent;
        this.locations = new HashMap<>(locations);
    }

    @Override
    public Partition[] getPartitions() {
        return parent.partitions();
    }

    @Override
    public Iterator<InternalRow> compute(Partition split, TaskContext context) {
        SparkEnv env = SparkEnv.get();
        if (env != null) {
            context.getLocalProperties().setProperty(
                    StickyPlacement.EXECUTOR_ID_PROPERTY, env.executorId());
        }
        return parent.iterator(split, context);
    }

    @Override
    public Seq<String> getPreferredLocations(Partition split) {
        String location = locations == null ? null : locations.get(split.index());
        List<String> preferred = location == null ? List.of() : List.of(location);
        return CollectionConverters.asScala(preferred).toList();
    }
}
