// pgjdbc's CopyManager (Debian's libpostgresql-jdbc-java) against a culprit
// server over the demo workload: copyOut of a query in CSV compared with a
// Statement running the same SELECT; with a write user, copyIn of CSV rows
// into the user table teams3, read back; with a read user, copyOut of teams3
// and a refused copyIn (42501).
// usage: java -cp /usr/share/java/postgresql.jar:. JdbcCopy HOST PORT [USER PASSWORD [ROLE]]
//   ROLE: write (the default when USER is given) or read.
// Every check prints one line; the first failure throws; the last line is `done jdbc-copy`.
import java.io.StringReader;
import java.io.StringWriter;
import java.sql.*;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Properties;

import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

public class JdbcCopy {
    static final String CULPRITS =
        "SELECT culprit_kind, culprit_query, blame_seconds, dor FROM culprits('q-victim') "
        + "ORDER BY blame_seconds DESC, culprit_kind, culprit_query, dor";
    static final String AGGRESSIVE =
        "SELECT culprit_query, blame_seconds, dor_sum, victims FROM aggressive_queries() "
        + "ORDER BY dor_sum DESC, culprit_query";

    // What a write user copies into teams3 (CSV: a quoted comma, a doubled
    // quote, an unquoted empty field is NULL).
    static final String TEAMS3_CSV =
        "alice,dashboards,1250.5\n"
        + "bob,\"etl, batch\",\n"
        + "mallory,\"the \"\"night\"\" shift\",0.25\n";
    static final List<List<String>> TEAMS3 = Arrays.asList(
        Arrays.asList("alice", "dashboards", "1250.5"),
        Arrays.asList("bob", "etl, batch", null),
        Arrays.asList("mallory", "the \"night\" shift", "0.25"));

    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
        System.out.println("ok  jdbc-copy: " + what);
    }

    /** PostgreSQL's CSV: an unquoted empty field is NULL (null here). */
    static List<List<String>> parseCsv(String text) {
        List<List<String>> rows = new ArrayList<>();
        List<String> row = new ArrayList<>();
        StringBuilder field = new StringBuilder();
        boolean quoted = false, inQuotes = false;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (inQuotes) {
                if (c == '"') {
                    if (i + 1 < text.length() && text.charAt(i + 1) == '"') {
                        field.append('"');
                        i++;
                    } else {
                        inQuotes = false;
                    }
                } else {
                    field.append(c);
                }
            } else if (c == '"') {
                inQuotes = quoted = true;
            } else if (c == ',' || c == '\n') {
                row.add(!quoted && field.length() == 0 ? null : field.toString());
                field.setLength(0);
                quoted = false;
                if (c == '\n') {
                    rows.add(row);
                    row = new ArrayList<>();
                }
            } else if (c == '\r' && i + 1 < text.length() && text.charAt(i + 1) == '\n') {
                // CRLF line ends: the \n ends the row.
            } else {
                field.append(c);
            }
        }
        if (inQuotes) throw new AssertionError("CSV: an unterminated quoted field");
        if (field.length() > 0 || quoted || !row.isEmpty()) {
            row.add(!quoted && field.length() == 0 ? null : field.toString());
            rows.add(row);
        }
        return rows;
    }

    /** One CSV field (text or null) holds the ResultSet's value of column i. */
    static boolean same(ResultSet rs, int i, String got) throws SQLException {
        int type = rs.getMetaData().getColumnType(i);
        if (type == Types.DOUBLE || type == Types.FLOAT || type == Types.REAL) {
            double want = rs.getDouble(i);
            if (rs.wasNull()) return got == null;
            return got != null && (Double.parseDouble(got) == want
                || (Double.isNaN(want) && got.equals("NaN")));
        }
        if (type == Types.BIGINT || type == Types.INTEGER || type == Types.SMALLINT) {
            long want = rs.getLong(i);
            if (rs.wasNull()) return got == null;
            return got != null && Long.parseLong(got) == want;
        }
        String want = rs.getString(i);
        return Objects.equals(want, got);
    }

    static void copyOutEqualsSelect(Connection c, CopyManager cm, String name, String q, int firstColumn)
            throws Exception {
        StringWriter w = new StringWriter();
        long n = cm.copyOut("COPY (" + q + ") TO STDOUT WITH (FORMAT csv, HEADER)", w);
        List<List<String>> csv = parseCsv(w.toString());
        check(!csv.isEmpty(), name + ": copyOut gave a header -> " + csv.size() + " lines");
        List<String> header = csv.get(0);
        try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery(q)) {
            ResultSetMetaData md = rs.getMetaData();
            List<String> names = new ArrayList<>();
            for (int i = 1; i <= md.getColumnCount(); i++) names.add(md.getColumnLabel(i));
            check(header.equals(names), name + ": CSV header " + header + " equals the columns " + names);
            int row = 0;
            while (rs.next()) {
                row++;
                if (row == 1) {
                    check("q-culprit".equals(rs.getString(firstColumn)),
                        name + ": q-culprit ranked first -> " + rs.getString(firstColumn));
                }
                if (row >= csv.size()) throw new AssertionError(name + ": copyOut has fewer rows than the SELECT (" + (csv.size() - 1) + ")");
                List<String> got = csv.get(row);
                if (got.size() != names.size()) throw new AssertionError(name + ": row " + row + " has " + got.size() + " fields: " + got);
                for (int i = 1; i <= names.size(); i++) {
                    if (!same(rs, i, got.get(i - 1))) {
                        throw new AssertionError(name + ": row " + row + " column " + names.get(i - 1)
                            + ": COPY " + got.get(i - 1) + ", SELECT " + rs.getString(i));
                    }
                }
            }
            check(row > 0 && row == csv.size() - 1,
                name + ": copyOut CSV rows equal the SELECT's -> " + (csv.size() - 1) + " vs " + row);
            check(n == row, name + ": copyOut's COPY tag -> " + n);
        }
    }

    static List<List<String>> teams3(Connection c) throws SQLException {
        List<List<String>> rows = new ArrayList<>();
        try (Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT \"user\", team, budget FROM teams3 ORDER BY \"user\"")) {
            while (rs.next()) {
                double b = rs.getDouble(3);
                String budget = rs.wasNull() ? null : Double.toString(b);
                rows.add(Arrays.asList(rs.getString(1), rs.getString(2), budget));
            }
        }
        return rows;
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/culprit";
        Properties props = new Properties();
        props.setProperty("user", args.length > 2 ? args[2] : "culprit");
        if (args.length > 3) props.setProperty("password", args[3]);
        String role = args.length > 4 ? args[4] : (args.length > 3 ? "write" : null);
        try (Connection c = DriverManager.getConnection(url, props)) {
            CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
            copyOutEqualsSelect(c, cm, "culprits", CULPRITS, 2);
            copyOutEqualsSelect(c, cm, "aggressive_queries", AGGRESSIVE, 1);

            if ("write".equals(role)) {
                try (Statement st = c.createStatement()) {
                    st.execute("DROP TABLE IF EXISTS teams3");
                    st.execute("CREATE TABLE teams3 (\"user\" text, team text, budget double precision)");
                }
                long n = cm.copyIn("COPY teams3 FROM STDIN WITH (FORMAT csv)", new StringReader(TEAMS3_CSV));
                check(n == TEAMS3.size(), "copyIn's COPY tag -> " + n);
                List<List<String>> got = teams3(c);
                check(got.equals(TEAMS3), "teams3 holds the copied rows -> " + got);
            } else if ("read".equals(role)) {
                List<List<String>> want = teams3(c);
                check(want.equals(TEAMS3), "a read user sees teams3 -> " + want);
                StringWriter w = new StringWriter();
                long n = cm.copyOut("COPY teams3 TO STDOUT WITH (FORMAT csv)", w);
                List<List<String>> out = parseCsv(w.toString());
                out.sort((a, b) -> a.get(0).compareTo(b.get(0)));
                List<List<String>> norm = new ArrayList<>();
                for (List<String> r : out) {
                    String budget = r.get(2) == null ? null : Double.toString(Double.parseDouble(r.get(2)));
                    norm.add(Arrays.asList(r.get(0), r.get(1), budget));
                }
                check(n == TEAMS3.size() && norm.equals(TEAMS3), "a read user's copyOut of teams3 -> " + norm);
                try {
                    cm.copyIn("COPY teams3 FROM STDIN WITH (FORMAT csv)", new StringReader("eve,intruders,1\n"));
                    throw new AssertionError("a read user's copyIn into teams3 was accepted");
                } catch (SQLException e) {
                    check("42501".equals(e.getSQLState()) && e.getMessage().contains("read-only"),
                        "a read user's copyIn refused -> " + e.getSQLState() + " " + e.getMessage());
                }
                check(teams3(c).equals(TEAMS3), "teams3 unchanged after the refusal");
            }
        }
        System.out.println("done jdbc-copy");
    }
}
