// Compresses a file with the stream classes Apache Spark uses for each
// spark.io.compression.codec (CompressionCodec.scala), as Spark writes its
// event logs: lz4 = lz4-java LZ4BlockOutputStream, snappy = snappy-java
// SnappyOutputStream, lzf = compress-lzf LZFOutputStream, zstd = zstd-jni
// ZstdOutputStream. Used by the culprit tests, with Debian's Java packages.
//
// usage: java -cp ... SparkCodecs INPUT OUTPUT_PREFIX
// writes OUTPUT_PREFIX.lz4, .snappy, .lzf, .zstd
import java.io.*;
import java.nio.file.*;

public class SparkCodecs {
    public static void main(String[] args) throws Exception {
        byte[] data = Files.readAllBytes(Paths.get(args[0]));
        String prefix = args[1];
        int blockSize = 32 * 1024; // spark.io.compression.*.blockSize default
        write(prefix + ".lz4", new net.jpountz.lz4.LZ4BlockOutputStream(
            new FileOutputStream(prefix + ".lz4"), blockSize), data);
        write(prefix + ".snappy", new org.xerial.snappy.SnappyOutputStream(
            new FileOutputStream(prefix + ".snappy"), blockSize), data);
        write(prefix + ".lzf", new com.ning.compress.lzf.LZFOutputStream(
            new FileOutputStream(prefix + ".lzf")), data);
        write(prefix + ".zstd", new com.github.luben.zstd.ZstdOutputStream(
            new FileOutputStream(prefix + ".zstd"), 1), data);
    }

    // Spark writes an event log line by line through a buffered writer.
    static void write(String name, OutputStream codec, byte[] data) throws IOException {
        try (OutputStream out = new BufferedOutputStream(codec, 8192)) {
            out.write(data);
        }
    }
}
