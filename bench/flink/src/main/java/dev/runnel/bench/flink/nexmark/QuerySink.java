package dev.runnel.bench.flink.nexmark;

import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.types.Row;

import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

/**
 * The sink of a query's changelog stream ({@code toChangelogStream}) into a JSON lines file, at
 * parallelism 1. Its writer feeds a {@link QueryOutput} (insert-only rows straight to the file, an
 * updating query's changelog applied) writing to {@code <file>.tmp}, and at the end of input writes
 * the final result set and renames the temporary file into place, so that the output file is either
 * the whole result or absent. A failed or cancelled job deletes the temporary file.
 *
 * <p>The job runs with no restarts ({@link NexmarkJob#config}); a sink that restarted from a
 * checkpoint would have to truncate the temporary file to the checkpoint, and this one does not.
 */
final class QuerySink implements Sink<Row> {
    private static final long serialVersionUID = 1L;

    private final Query query;
    private final ArrayList<String> names;
    private final String file;

    QuerySink(Query query, List<String> names, Path file) {
        this.query = query;
        this.names = new ArrayList<>(names);
        this.file = file.toAbsolutePath().toString();
    }

    @Override
    public SinkWriter<Row> createWriter(WriterInitContext context) throws IOException {
        if (context.getTaskInfo().getNumberOfParallelSubtasks() != 1) {
            throw new IllegalStateException("the nexmark output sink must run at parallelism 1, not "
                    + context.getTaskInfo().getNumberOfParallelSubtasks());
        }
        return new FileWriter(query, names, Path.of(file));
    }

    private static final class FileWriter implements SinkWriter<Row> {
        private final Path file;
        private final Path tmp;
        private final Writer w;
        private final QueryOutput out;
        private boolean done;

        FileWriter(Query query, List<String> names, Path file) throws IOException {
            this.file = file;
            this.tmp = file.resolveSibling(file.getFileName() + ".tmp");
            this.w = Files.newBufferedWriter(tmp, StandardCharsets.UTF_8);
            this.out = new QueryOutput(query, names, w);
        }

        @Override
        public void write(Row row, Context context) throws IOException {
            out.accept(row);
        }

        @Override
        public void flush(boolean endOfInput) throws IOException {
            if (!endOfInput || done) {
                return; // checkpoints do not commit anything: the file is renamed at the end only
            }
            out.finish();
            w.close();
            Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
            done = true;
        }

        @Override
        public void close() throws IOException {
            if (!done) {
                try {
                    w.close();
                } finally {
                    Files.deleteIfExists(tmp);
                }
            }
        }
    }
}
