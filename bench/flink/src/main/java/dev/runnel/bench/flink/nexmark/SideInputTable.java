package dev.runnel.bench.flink.nexmark;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.table.connector.source.DynamicTableSource;
import org.apache.flink.table.connector.source.LookupTableSource;
import org.apache.flink.table.connector.source.lookup.LookupFunctionProvider;
import org.apache.flink.table.data.GenericRowData;
import org.apache.flink.table.data.RowData;
import org.apache.flink.table.data.StringData;
import org.apache.flink.table.factories.DynamicTableSourceFactory;
import org.apache.flink.table.factories.FactoryUtil;
import org.apache.flink.table.functions.LookupFunction;

import java.util.Collection;
import java.util.List;
import java.util.Set;

/**
 * The bounded side input of q13 as a lookup table: connector {@code nexmark-side-input}, columns
 * {@code key BIGINT, value STRING}, the rows {@code (k, "k")} for {@code k} in {@code [0, rows)}
 * (option {@code rows}, default 10,000): the Nexmark suite's side input file, and Runnel's default
 * side input of q13.
 *
 * <p>Why a connector of its own: the Nexmark suite declares the side input as a CSV file of the
 * legacy filesystem connector, which could serve lookups; Flink 2.x removed the legacy connectors,
 * and the filesystem connector of {@code flink-connector-files} 2.3 is a scan source only, so a
 * lookup join ({@code FOR SYSTEM_TIME AS OF} a processing time) cannot read it. This source serves
 * the same rows to the same lookup join, computing each row from its key: no state, no cache, no
 * file, as a lookup against a fully cached table costs.
 */
public final class SideInputTable implements DynamicTableSourceFactory {
    /** The connector's name in a table's {@code WITH} clause. */
    public static final String IDENTIFIER = "nexmark-side-input";

    /** How many rows the side input has: keys {@code 0 .. rows-1}. */
    public static final ConfigOption<Long> ROWS =
            ConfigOptions.key("rows").longType().defaultValue(10_000L).withDescription("the side input's rows");

    @Override
    public String factoryIdentifier() {
        return IDENTIFIER;
    }

    @Override
    public Set<ConfigOption<?>> requiredOptions() {
        return Set.of();
    }

    @Override
    public Set<ConfigOption<?>> optionalOptions() {
        return Set.of(ROWS);
    }

    @Override
    public DynamicTableSource createDynamicTableSource(Context context) {
        FactoryUtil.TableFactoryHelper helper = FactoryUtil.createTableFactoryHelper(this, context);
        helper.validate();
        List<String> columns = context.getCatalogTable().getResolvedSchema().getColumnNames();
        if (!columns.equals(List.of("key", "value"))) {
            throw new IllegalArgumentException(IDENTIFIER + " has the columns (key BIGINT, value STRING), not " + columns);
        }
        long rows = helper.getOptions().get(ROWS);
        if (rows < 0) {
            throw new IllegalArgumentException(IDENTIFIER + ": rows must not be negative, got " + rows);
        }
        return new Source(rows);
    }

    /** The lookup source: the lookup key must be the {@code key} column alone. */
    static final class Source implements LookupTableSource {
        private final long rows;

        Source(long rows) {
            this.rows = rows;
        }

        @Override
        public LookupRuntimeProvider getLookupRuntimeProvider(LookupContext context) {
            int[][] keys = context.getKeys();
            if (keys.length != 1 || keys[0].length != 1 || keys[0][0] != 0) {
                throw new IllegalArgumentException(IDENTIFIER + " is looked up by its key column alone");
            }
            return LookupFunctionProvider.of(new Lookup(rows));
        }

        @Override
        public DynamicTableSource copy() {
            return new Source(rows);
        }

        @Override
        public String asSummaryString() {
            return IDENTIFIER + "(" + rows + " rows)";
        }
    }

    /** Row {@code (k, "k")} for a key {@code k} in {@code [0, rows)}, none for any other key. */
    public static final class Lookup extends LookupFunction {
        private static final long serialVersionUID = 1L;
        private final long rows;

        public Lookup(long rows) {
            this.rows = rows;
        }

        @Override
        public Collection<RowData> lookup(RowData keyRow) {
            if (keyRow.isNullAt(0)) {
                return List.of();
            }
            long k = keyRow.getLong(0);
            if (k < 0 || k >= rows) {
                return List.of();
            }
            return List.of(GenericRowData.of(k, StringData.fromString(Long.toString(k))));
        }
    }
}
