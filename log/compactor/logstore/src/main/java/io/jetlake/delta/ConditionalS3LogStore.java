package io.jetlake.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log store for S3 that is safe with any number of writers.
 *
 * <p>Delta commits version N of a table by writing {@code _delta_log/N.json} only if it is
 * absent; whoever loses must see {@link FileAlreadyExistsException} and retry or give up.
 * Delta's own S3 store checks absence in one JVM only, so two drivers can both "create" N and
 * one commit silently vanishes. Here the absence check is the store's: S3A's conditional
 * create sends {@code If-None-Match: *} with the object, and the store refuses the second
 * writer (412), which becomes the exception Delta expects. A PUT is atomic, so no partial
 * commit file is ever visible.
 */
public class ConditionalS3LogStore extends HadoopFileSystemLogStore {
  static final String CONDITIONAL = "fs.option.create.conditional.overwrite";

  public ConditionalS3LogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration conf)
      throws IOException {
    FSDataOutputStreamBuilder<?, ?> builder =
        path.getFileSystem(conf).createFile(path).overwrite(overwrite).recursive();
    if (!overwrite) {
      builder.must(CONDITIONAL, true);
    }
    try (FSDataOutputStream out = (FSDataOutputStream) builder.build()) {
      while (actions.hasNext()) {
        out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
      }
    } catch (IOException e) {
      if (!overwrite && lostRace(e)) {
        FileAlreadyExistsException lost = new FileAlreadyExistsException(path.toString());
        lost.initCause(e);
        throw lost;
      }
      throw e;
    }
  }

  /** Another writer's object is there: S3A's own existence probe, or the store's 412. */
  private static boolean lostRace(IOException e) {
    String name = e.getClass().getSimpleName();
    String text = String.valueOf(e.getMessage());
    return e instanceof FileAlreadyExistsException
        || name.equals("FileAlreadyExistsException")
        || name.equals("RemoteFileChangedException")
        || text.contains("412")
        || text.contains("PreconditionFailed");
  }

  @Override
  public Boolean isPartialWriteVisible(Path path, Configuration conf) {
    return false;
  }
}
