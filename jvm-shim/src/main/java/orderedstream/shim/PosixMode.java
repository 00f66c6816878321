package orderedstream.shim;

import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

/** A numeric file mode as {@code java.nio} permissions ({@link ForklessCheckpointFileManager}). */
final class PosixMode {

    private static final PosixFilePermission[] BITS = {
        PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
        PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
        PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
        PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
        PosixFilePermission.OWNER_READ};

    private PosixMode() {
    }

    /** The rwx bits of {@code mode}, as {@code chmod} reads its octal argument (the setuid,
     * setgid and sticky bits above them are not permissions and are left out). */
    static Set<PosixFilePermission> of(short mode) {
        Set<PosixFilePermission> out = EnumSet.noneOf(PosixFilePermission.class);
        for (int bit = 0; bit < BITS.length; bit++) {
            if ((mode & (1 << bit)) != 0) {
                out.add(BITS[bit]);
            }
        }
        return out;
    }
}
