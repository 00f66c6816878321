package orderedstream.shim;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.attribute.PosixFilePermissions;

import org.junit.jupiter.api.Test;

class PosixModeTest {

    private static String mode(int octal) {
        return PosixFilePermissions.toString(PosixMode.of((short) octal));
    }

    @Test
    void modesMapAsChmodReadsThem() {
        assertEquals("rw-r--r--", mode(0644));
        assertEquals("rwxr-xr-x", mode(0755));
        assertEquals("rwx------", mode(0700));
        assertEquals("-w---x-wx", mode(0213));
        assertEquals("---------", mode(0));
    }

    @Test
    void bitsAboveThePermissionsAreIgnored() {
        assertEquals("rwxrwxrwx", mode(01777));
    }
}
