// pgjdbc (Debian's libpostgresql-jdbc-java) against a culprit server:
// DatabaseMetaData.getTables / getColumns and a PreparedStatement.
// usage: java -cp /usr/share/java/postgresql.jar:. Jdbc HOST PORT
import java.sql.*;

public class Jdbc {
    static void check(boolean ok, String what) {
        if (!ok) throw new AssertionError(what);
        System.out.println("ok  jdbc: " + what);
    }

    public static void main(String[] args) throws Exception {
        String url = "jdbc:postgresql://" + args[0] + ":" + args[1] + "/culprit?user=culprit";
        try (Connection c = DriverManager.getConnection(url)) {
            DatabaseMetaData md = c.getMetaData();
            check(md.getDatabaseProductVersion().startsWith("16"), "server version " + md.getDatabaseProductVersion());
            int tables = 0;
            boolean tasks = false;
            try (ResultSet rs = md.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables++;
                    tasks |= rs.getString("TABLE_NAME").equals("tasks");
                }
            }
            check(tasks, "getTables -> " + tables + " tables");
            int cols = 0;
            boolean launch = false;
            try (ResultSet rs = md.getColumns(null, "public", "tasks", "%")) {
                while (rs.next()) {
                    cols++;
                    launch |= rs.getString("COLUMN_NAME").equals("launch_time");
                }
            }
            check(launch, "getColumns(tasks) -> " + cols + " columns");
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT culprit_query, blame_seconds FROM culprits(?) ORDER BY blame_seconds DESC")) {
                ps.setString(1, "q-victim");
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next() && rs.getString(1).equals("q-culprit"), "PreparedStatement culprits(?)");
                }
            }
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT count(*) FROM tasks WHERE query_id = ? AND launch_time >= ?")) {
                ps.setString(1, "q-victim");
                ps.setTimestamp(2, new Timestamp(0));
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next() && rs.getLong(1) > 0, "PreparedStatement with text and timestamp");
                }
            }
        }
    }
}
