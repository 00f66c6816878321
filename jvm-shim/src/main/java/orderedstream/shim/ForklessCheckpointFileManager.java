package orderedstream.shim;

import java.io.IOException;
import java.nio.file.Files;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;
import org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager;

/**
 * Spark's {@code FileSystem} checkpoint file manager for a query whose checkpoint is on local
 * disk, without a {@code chmod} process per file it writes.
 *
 * <p>Without Hadoop's native library (pyspark ships none), Hadoop's local filesystem sets the
 * permission of every file and directory it creates by running {@code chmod} in a new process
 * ({@code RawLocalFileSystem.setPermission}): four per micro-batch for the offset and commit
 * logs' files and their checksums, each 4-5 ms on the stream's thread, inside
 * {@code walCommit} and {@code commitOffsets}. This manager's filesystem (its own instance,
 * not Hadoop's shared one) sets the same mode with {@code java.nio} instead; where Hadoop's
 * native library is loaded, or the disk has no POSIX permissions, Hadoop's own call is made.
 * Everything else (atomic rename, checksum files, listing) is Spark's manager unchanged.
 */
public class ForklessCheckpointFileManager extends FileSystemBasedCheckpointFileManager {

    public ForklessCheckpointFileManager(Path path, Configuration hadoopConf) {
        super(path, forkless(hadoopConf));
    }

    /** {@code conf} with {@code file:} served by a private {@link ForklessLocalFileSystem}. */
    static Configuration forkless(Configuration conf) {
        Configuration copy = new Configuration(conf);
        copy.setClass("fs.file.impl", ForklessLocalFileSystem.class, FileSystem.class);
        copy.setBoolean("fs.file.impl.disable.cache", true);  // never the process's shared one
        return copy;
    }

    /** Hadoop's checksummed local filesystem over {@link Raw}. */
    public static final class ForklessLocalFileSystem extends LocalFileSystem {
        public ForklessLocalFileSystem() {
            super(new Raw());
        }
    }

    /** Hadoop's raw local filesystem whose {@code setPermission} starts no process. */
    public static final class Raw extends RawLocalFileSystem {
        @Override
        public void setPermission(Path p, FsPermission permission) throws IOException {
            if (NativeIO.isAvailable()) {
                super.setPermission(p, permission);
                return;
            }
            try {
                Files.setPosixFilePermissions(pathToFile(p).toPath(),
                                              PosixMode.of(permission.toShort()));
            } catch (UnsupportedOperationException notPosix) {
                super.setPermission(p, permission);
            }
        }
    }
}
