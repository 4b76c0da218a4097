package io.jetlake.sql;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.BasePredicate;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Contains;
import org.apache.spark.sql.catalyst.expressions.EqualTo;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.Lower;
import org.apache.spark.sql.catalyst.expressions.Not;
import org.apache.spark.sql.catalyst.expressions.Or;
import org.apache.spark.sql.catalyst.expressions.Predicate;
import org.apache.spark.sql.catalyst.expressions.StartsWith;
import org.apache.spark.sql.catalyst.expressions.Substring;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.CommandResult;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.types.DataTypes;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;

/**
 * Catalog listings of a walled session: {@code SHOW TABLES}, {@code SHOW VIEWS}, {@code SHOW
 * DATABASES} (and the catalog API calls that run them: Connect's {@code
 * spark.catalog.listTables()}) list what the session's account may read, nothing more.
 *
 * <p>Every account's views are global temporary views of one JVM, so an unwalled listing names
 * every account's streams. This post-hoc analyzer rule wraps a listing command of a session
 * bound to an account in a filter on its rows: the session's own temporary views and its
 * account's global views ({@code global_temp.`A.ORDERS`}); no table of the metastore (those are
 * every account's), and of the databases {@code default} alone. The plan check ({@link
 * AccountWalls}) lets a listing through only so wrapped, so a listing the rule missed is refused,
 * never unfiltered. The filter is rebuilt from the account and the listing's own columns, the
 * same each time: the check recognises it by equality.
 */
final class Listings extends Rule<LogicalPlan> {
  private static final Set<String> TABLES =
      Set.of(
          "ShowTables", "ShowTablesExtended", "ShowTablesCommand", "ShowViews", "ShowViewsCommand");
  private static final Set<String> NAMESPACES = Set.of("ShowNamespaces", "ShowNamespacesCommand");
  private static final String DEFAULT_DATABASE = "default";

  private final SparkSession session;

  Listings(SparkSession session) {
    this.session = session;
  }

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!plan.exists(Listings::listing)) {
      return plan;
    }
    StreamViews.refresh(List.of()); // it lists the streams as they are now, as a query reads them
    String account = AccountWalls.account(session);
    return account == null ? plan : wrap(plan, account);
  }

  private static boolean listing(LogicalPlan plan) {
    return plan instanceof Command
        && (TABLES.contains(plan.nodeName()) || NAMESPACES.contains(plan.nodeName()));
  }

  private static LogicalPlan wrap(LogicalPlan plan, String account) {
    if (walled(plan, account)) {
      return plan;
    }
    Expression visible = visible(plan, account);
    if (visible != null) {
      return new Filter(visible, plan);
    }
    return plan.mapChildren(
        new AbstractFunction1<LogicalPlan, LogicalPlan>() {
          @Override
          public LogicalPlan apply(LogicalPlan child) {
            return wrap(child, account);
          }
        });
  }

  /** Whether a plan is a listing this rule wrapped for the account. */
  static boolean walled(LogicalPlan plan, String account) {
    return plan instanceof Filter f && f.condition().equals(visible(f.child(), account));
  }

  /** The rows of a listing the account may see, or null when the plan is no listing. */
  private static Expression visible(LogicalPlan plan, String account) {
    if (!(plan instanceof Command)) {
      return null;
    }
    String kind = plan.nodeName();
    if (NAMESPACES.contains(kind)) {
      return new EqualTo(column(plan, 0), text(DEFAULT_DATABASE));
    }
    if (!TABLES.contains(kind)) {
      return null;
    }
    // (namespace, name, isTemporary[, information]): a session's own temporary views have no
    // namespace; global ones are global_temp's, named as the catalog keeps them (lower case).
    Expression namespace = column(plan, 0);
    Expression name = new Lower(column(plan, 1));
    Expression temporary = column(plan, 2);
    String prefix = StreamViews.qualified(account, "").toLowerCase(java.util.Locale.ROOT);
    Expression rest = new Substring(name, number(prefix.length() + 1), number(Integer.MAX_VALUE));
    Expression own =
        new And(new StartsWith(name, text(prefix)), new Not(new Contains(rest, text("."))));
    return new And(temporary, new Or(new EqualTo(namespace, text("")), own));
  }

  /**
   * An optimizer rule: a filtered listing, once its command ran, becomes the rows it keeps.
   *
   * <p>Spark's catalog API collects a listing's internal rows without copying them, which holds
   * for a command's own result (distinct rows) but not for a filter run by generated code, whose
   * rows share one buffer: every table would read as the last one. Filtered here, on the
   * driver, the rows stay distinct.
   */
  static final class Kept extends Rule<LogicalPlan> {
    @Override
    public LogicalPlan apply(LogicalPlan plan) {
      if (plan instanceof Filter f && f.child() instanceof CommandResult listed) {
        BasePredicate keep = Predicate.create(f.condition(), listed.output());
        keep.initialize(0);
        List<InternalRow> rows = new ArrayList<>();
        for (InternalRow row : CollectionConverters.asJava(listed.rows())) {
          if (keep.eval(row)) {
            rows.add(row);
          }
        }
        return new LocalRelation(
            listed.output(), CollectionConverters.asScala(rows).toList(), false, Option.empty());
      }
      return plan.mapChildren(
          new AbstractFunction1<LogicalPlan, LogicalPlan>() {
            @Override
            public LogicalPlan apply(LogicalPlan child) {
              return Kept.this.apply(child);
            }
          });
    }
  }

  private static Attribute column(LogicalPlan plan, int index) {
    return plan.output().apply(index);
  }

  private static Literal text(String value) {
    return Literal.create(value, DataTypes.StringType);
  }

  private static Literal number(int value) {
    return Literal.create(value, DataTypes.IntegerType);
  }
}
