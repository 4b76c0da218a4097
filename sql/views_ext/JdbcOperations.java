package io.jetlake.sql;

import java.lang.reflect.Field;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.BiPredicate;
import org.apache.hive.service.cli.FetchOrientation;
import org.apache.hive.service.cli.HiveSQLException;
import org.apache.hive.service.cli.OperationHandle;
import org.apache.hive.service.cli.OperationStatus;
import org.apache.hive.service.cli.RowSet;
import org.apache.hive.service.cli.RowSetFactory;
import org.apache.hive.service.cli.SessionHandle;
import org.apache.hive.service.cli.operation.ExecuteStatementOperation;
import org.apache.hive.service.cli.operation.GetColumnsOperation;
import org.apache.hive.service.cli.operation.GetSchemasOperation;
import org.apache.hive.service.cli.operation.MetadataOperation;
import org.apache.hive.service.cli.operation.Operation;
import org.apache.hive.service.cli.operation.OperationManager;
import org.apache.hive.service.cli.session.HiveSession;
import org.apache.hive.service.cli.session.SessionManager;
import org.apache.hive.service.rpc.thrift.TRowSet;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.hive.thriftserver.SparkExecuteStatementOperation;
import org.apache.spark.sql.hive.thriftserver.SparkGetColumnsOperation;
import org.apache.spark.sql.hive.thriftserver.SparkGetSchemasOperation;
import org.apache.spark.sql.hive.thriftserver.SparkGetTablesOperation;
import org.apache.spark.sql.hive.thriftserver.server.SparkSQLOperationManager;

/**
 * The Thrift (JDBC/ODBC) door's operations: a result bounded by the service's max rows, and the
 * metadata calls BI tools browse with ({@code getTables}, {@code getColumns}, {@code
 * getSchemas}) walled as {@code SHOW TABLES} is ({@link Listings}).
 *
 * <p>Those calls read the catalog directly, past the analyzer and its check, so they list every
 * account's views unless filtered here; a statement's rows reach the client through {@code
 * getNextRowSet} and nowhere else, so that is where they are counted. The Thrift server makes
 * its operations in one manager, which {@link #install} replaces with this one, sharing the old
 * one's sessions (the server's session manager keeps registering them there).
 */
final class JdbcOperations extends SparkSQLOperationManager {
  private static final String ASYNC = "spark.sql.hive.thriftServer.async";
  private static final String INCREMENTAL = "spark.sql.thriftServer.incrementalCollect";
  private static final String GLOBAL_TEMP = "global_temp";
  private static final String DEFAULT_DATABASE = "default";
  private static final String OVER_LIMIT = "54000"; // SQLSTATE: a program limit exceeded

  private final SparkSQLOperationManager original;
  private final Map<OperationHandle, Operation> operations;

  @SuppressWarnings("unchecked")
  private JdbcOperations(SparkSQLOperationManager original) throws ReflectiveOperationException {
    this.original = original;
    // Spark's manager reads Hive's map by reflection on its own superclass: in a subclass of it
    // that finds nothing, so this one reads it itself.
    Field field = OperationManager.class.getDeclaredField("handleToOperation");
    field.setAccessible(true);
    this.operations = (Map<OperationHandle, Operation>) field.get(this);
  }

  @Override
  public Map<OperationHandle, Operation> handleToOperation() {
    return operations;
  }

  /** Puts this manager in the place of the Thrift server's own (before any session opens). */
  static void install(SessionManager sessions) throws ReflectiveOperationException {
    if (!(sessions.getOperationManager() instanceof SparkSQLOperationManager spark)) {
      return;
    }
    JdbcOperations walled = new JdbcOperations(spark);
    walled.init(sessions.getHiveConf());
    walled.start();
    Field field = SessionManager.class.getDeclaredField("operationManager");
    field.setAccessible(true);
    field.set(sessions, walled);
  }

  @Override
  public ConcurrentHashMap<SessionHandle, SparkSession> sessionToContexts() {
    return original.sessionToContexts();
  }

  private SparkSession session(HiveSession parent) {
    return sessionToContexts().get(parent.getSessionHandle());
  }

  private <T extends Operation> T register(T operation) {
    handleToOperation().put(operation.getHandle(), operation);
    return operation;
  }

  @Override
  public synchronized ExecuteStatementOperation newExecuteStatementOperation(
      HiveSession parent, String statement, Map<String, String> conf, boolean async, long timeout) {
    SparkSession session = session(parent);
    if (session == null) { // a session closed meanwhile: Spark's manager says so
      return super.newExecuteStatementOperation(parent, statement, conf, async, timeout);
    }
    boolean background = async && Boolean.parseBoolean(session.conf().get(ASYNC, "true"));
    return register(new Bounded(session, parent, statement, conf, background, timeout));
  }

  @Override
  public synchronized MetadataOperation newGetTablesOperation(
      HiveSession parent, String catalog, String schema, String table, List<String> types) {
    SparkSession session = session(parent);
    if (session == null) {
      return super.newGetTablesOperation(parent, catalog, schema, table, types);
    }
    return register(new Tables(session, parent, catalog, schema, table, types));
  }

  @Override
  public synchronized GetColumnsOperation newGetColumnsOperation(
      HiveSession parent, String catalog, String schema, String table, String column) {
    SparkSession session = session(parent);
    if (session == null) {
      return super.newGetColumnsOperation(parent, catalog, schema, table, column);
    }
    return register(new Columns(session, parent, catalog, schema, table, column));
  }

  @Override
  public synchronized GetSchemasOperation newGetSchemasOperation(
      HiveSession parent, String catalog, String schema) {
    SparkSession session = session(parent);
    if (session == null) {
      return super.newGetSchemasOperation(parent, catalog, schema);
    }
    return register(new Schemas(session, parent, catalog, schema));
  }

  /**
   * Whether an account sees a table: a view of its own in global_temp, or a temporary view of
   * the session (no schema); no table of the metastore, which holds every account's.
   */
  private static boolean visible(String account, Object schema, Object table) {
    if (schema == null || schema.toString().isEmpty()) {
      return true;
    }
    return GLOBAL_TEMP.equals(schema)
        && table != null
        && AccountWalls.own(account, table.toString());
  }

  private static boolean visibleSchema(Object schema) {
    return DEFAULT_DATABASE.equals(schema) || GLOBAL_TEMP.equals(schema);
  }

  /** Keeps the rows a walled session's account may see; an unwalled session's all. */
  private static void keep(
      SparkSession session, RowSet rows, BiPredicate<String, Object[]> visible) {
    String account = AccountWalls.account(session);
    if (account == null) {
      return;
    }
    // Every row taken out first, then the visible ones put back: the rows taken out are a view
    // of the set's storage (and each row one reused array) until then.
    List<Object[]> all = new ArrayList<>();
    for (Object[] row : rows.extractSubset(rows.numRows())) {
      all.add(row.clone());
    }
    for (Object[] row : all) {
      if (visible.test(account, row)) {
        rows.addRow(row);
      }
    }
  }

  /**
   * A statement whose rows past max rows end it with an error naming the key, and whose error
   * names nothing of another account's ({@link WalledErrors}): Hive sends the error's whole
   * chain of causes, each with its message, so the error itself is replaced.
   */
  private static final class Bounded extends SparkExecuteStatementOperation {
    private final SparkSession session;
    private long sent;

    Bounded(
        SparkSession session,
        HiveSession parent,
        String statement,
        Map<String, String> conf,
        boolean background,
        long timeout) {
      super(session, parent, statement, conf, background, timeout);
      this.session = session;
      // Its rows are fetched a partition at a time as the client reads them, not gathered
      // first: a result of 10 GB stops at max rows, one partition in.
      session.conf().set(INCREMENTAL, "true");
    }

    @Override
    public void run() {
      try {
        super.run();
      } catch (Exception e) { // HiveSQLException, which Scala's run throws undeclared
        HiveSQLException told = told(e);
        throw AccountWalls.unchecked(told == null ? e : told);
      }
    }

    @Override
    public OperationStatus getStatus() {
      OperationStatus status = super.getStatus();
      HiveSQLException error = status.getOperationException();
      HiveSQLException told = error == null ? null : told(error);
      return told == null ? status : new OperationStatus(status.getState(), told);
    }

    /** The error to send in place of {@code error}, or null when it hides nothing. */
    private HiveSQLException told(Exception error) {
      Throwable cleaned = WalledErrors.clean(session, error);
      if (cleaned == error) {
        return null;
      }
      String state = cleaned instanceof org.apache.spark.SparkThrowable t ? t.getSqlState() : null;
      return new HiveSQLException("Error running query: " + cleaned.getMessage(), state);
    }

    @Override
    public TRowSet getNextRowSet(FetchOrientation order, long maxRows) {
      TRowSet rows = super.getNextRowSet(order, maxRows);
      if (order == FetchOrientation.FETCH_FIRST) {
        sent = 0;
      }
      try {
        sent += RowSetFactory.create(rows, getProtocolVersion()).numRows();
      } catch (org.apache.thrift.TException e) {
        throw AccountWalls.unchecked(new HiveSQLException(e));
      }
      long limit = ConnectDoor.maxRows();
      if (sent > limit) {
        cancel();
        throw AccountWalls.unchecked(new HiveSQLException(
            "the result has more than " + limit + " rows, the service's max_rows"
                + " (lake { sql { max_rows } }): aggregate, or add a LIMIT",
            OVER_LIMIT));
      }
      return rows;
    }
  }

  private static final class Tables extends SparkGetTablesOperation {
    private final SparkSession session;

    Tables(
        SparkSession session,
        HiveSession parent,
        String catalog,
        String schema,
        String table,
        List<String> types) {
      super(session, parent, catalog, schema, table, types);
      this.session = session;
    }

    @Override
    public void runInternal() {
      super.runInternal();
      keep(session, rowSet, (account, row) -> visible(account, row[1], row[2])); // SCHEM, NAME
    }
  }

  private static final class Columns extends SparkGetColumnsOperation {
    private final SparkSession session;

    Columns(
        SparkSession session,
        HiveSession parent,
        String catalog,
        String schema,
        String table,
        String column) {
      super(session, parent, catalog, schema, table, column);
      this.session = session;
    }

    @Override
    public void runInternal() {
      super.runInternal();
      keep(session, rowSet, (account, row) -> visible(account, row[1], row[2])); // SCHEM, NAME
    }
  }

  private static final class Schemas extends SparkGetSchemasOperation {
    private final SparkSession session;

    Schemas(SparkSession session, HiveSession parent, String catalog, String schema) {
      super(session, parent, catalog, schema);
      this.session = session;
    }

    @Override
    public void runInternal() {
      super.runInternal();
      keep(session, rowSet, (account, row) -> visibleSchema(row[0]));
    }
  }
}
